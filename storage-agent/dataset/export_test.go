package dataset

import (
	"crypto/sha256"
	"encoding/binary"
)

// For the external tests: the index file's default name in the data
// directory and the manifest file's magics.
const (
	IndexName       = indexName
	ManifestMagic   = manifestMagic
	ManifestMagicV1 = manifestMagicV1
)

// EncodeManifestV1 is m in the version 1 layout (no headers), as
// manifests written before version 2 are.
func EncodeManifestV1(m *Manifest) []byte {
	b := []byte(manifestMagicV1)
	var flags uint64
	if m.Tars {
		flags |= manifestTars
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, uint64(len(m.Classes)))
	for _, c := range m.Classes {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Samples)))
	for _, s := range m.Samples {
		b = binary.AppendUvarint(b, uint64(len(s.Rel)))
		b = append(b, s.Rel...)
		b = binary.AppendUvarint(b, s.Size)
		b = binary.AppendUvarint(b, uint64(s.Label))
		b = append(b, s.Hash[:]...)
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}
