// Package dataset provides the samples a storage agent serves: a read-only
// catalog opened from a directory (an ImageFolder tree or WebDataset-style
// tar shards) under an [os.Root], or from an object store ([Store]; the
// S3 one is package s3src), with dense sample ids, labels, content
// hashes and a fingerprint; the content-hash index file that spares a
// restart from hashing everything again; and the manifest, the whole
// dataset's catalog in one file, with which agents that each hold part of
// the files serve it together. It opens and reads files and nothing else:
// serving, budgets and placement belong to the storageagent package.
package dataset
