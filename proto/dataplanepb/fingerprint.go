package dataplanepb

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
)

// FingerprintVersion prefixes the bytes the fingerprint hashes; it changes
// whenever what the fingerprint covers changes.
const FingerprintVersion = "sophon-catalog 2\n"

// Fingerprinter computes a dataset fingerprint, the identity both agents
// compare: the first 16 hex digits of SHA-256 over FingerprintVersion, the
// 32-byte paths digest (CatalogPage.paths_digest) and, per sample in id
// order, its raw size (8 bytes little-endian), label (4 bytes
// little-endian) and content hash (32 bytes). It covers content, so two
// storage agents with one fingerprint serve the same bytes under the same
// ids; and a compute agent recomputes it from the catalog alone.
type Fingerprinter struct {
	h   hash.Hash
	buf [8 + 4 + 32]byte
}

// NewFingerprinter starts a fingerprint over pathsDigest.
func NewFingerprinter(pathsDigest []byte) *Fingerprinter {
	f := &Fingerprinter{h: sha256.New()}
	f.h.Write([]byte(FingerprintVersion))
	f.h.Write(pathsDigest)
	return f
}

// Add appends the next sample.
func (f *Fingerprinter) Add(size uint64, label uint32, contentHash [32]byte) {
	binary.LittleEndian.PutUint64(f.buf[0:], size)
	binary.LittleEndian.PutUint32(f.buf[8:], label)
	copy(f.buf[12:], contentHash[:])
	f.h.Write(f.buf[:])
}

// Sum is the fingerprint of the samples added so far.
func (f *Fingerprinter) Sum() string {
	return hex.EncodeToString(f.h.Sum(nil))[:16]
}
