package dataset

// For the external tests: the index file's default name in the data
// directory and the manifest file's magics.
const (
	IndexName       = indexName
	ManifestMagic   = manifestMagic
	ManifestMagicV1 = manifestMagicV1
)

// EncodeManifestV1 is m in the version 1 layout (no headers), as
// manifests written before version 2 are.
func EncodeManifestV1(m *Manifest) []byte { return m.encode(manifestMagicV1, false) }
