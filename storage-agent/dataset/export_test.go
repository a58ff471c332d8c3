package dataset

// For the external tests: the index file's default name in the data
// directory and the manifest file's magic.
const (
	IndexName     = indexName
	ManifestMagic = manifestMagic
)
