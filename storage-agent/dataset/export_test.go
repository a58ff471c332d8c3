package dataset

// Names of files for the external tests.
const (
	IndexName     = indexName
	ManifestMagic = manifestMagic
)
