// Package atomicfile replaces a file beneath an [os.Root] so that a reader
// sees the old content or the new, never a part: a temporary file written
// and synced, then renamed over the name. Both agents use it: the storage
// agent for its index files, the compute agent for its cache entries.
package atomicfile

import (
	"io"
	"os"
)

// File is what Write writes through: an *os.File, or a test's stand-in.
type File interface {
	io.Writer
	Sync() error
	Close() error
}

// Write writes b to tmp, created beneath root by create, syncs and closes
// it, and renames it over name; on any failure it removes tmp. The caller
// names tmp (so that it can recognise leftovers) and syncs the directory
// when the rename must survive a crash.
func Write(root *os.Root, tmp, name string, b []byte, create func(tmp string) (File, error)) error {
	f, err := create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}
