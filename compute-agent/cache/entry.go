package cache

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// An entry file is one sample at one split:
//
//	offset  size  field
//	0       8     magic "SPHXCACH"
//	8       2     format version (2), little-endian like every field
//	10      4     split (int32: 0 the encoded file, n the finished output)
//	14      8     sample id
//	22      8     payload length
//	30      2     fingerprint length (at most MaxName)
//	32      2     pipeline id length (at most MaxName)
//	34      2     build length (at most MaxName)
//	36      ...   fingerprint, pipeline id, build, payload
//	end-36  32    HMAC-SHA256, under the store's key, of every byte before it
//	end-4   4     CRC-32C of every byte before it
//
// Decode checks all of it before it returns the payload. The CRC tells an
// accident (a flipped bit, a torn write) from a forgery: an entry whose
// CRC holds but whose MAC does not was written by someone without the
// store's key (Options.KeyFile, kept outside the directory), however
// well they knew the format (ErrForged). The fetch engine also checks a
// raw payload against the catalog's content hash; a finished output has
// only the MAC, made when the agent computed it from a checked raw file.
const (
	magic = "SPHXCACH"
	// version is the entry format's; an entry of another one is stale
	// (errFormat): removed at open without a warning.
	version    = 2
	headerSize = 36
	macSize    = sha256.Size
	trailer    = macSize + 4
	// MaxName bounds an entry's fingerprint, pipeline id and build.
	MaxName = 1024
	// DefaultMaxPayload bounds an entry's payload when Options.MaxPayload
	// is zero.
	DefaultMaxPayload = 1 << 30
)

// Errors of the cache. ErrEntry marks an entry that is not what it should
// be (corrupt, truncated, foreign, stale, forged): it is dropped and the
// sample fetched again.
var (
	ErrEntry = errors.New("cache: bad entry")
	// ErrForged marks an entry whose checksum holds but whose MAC does
	// not: written without the store's key (a forgery, or an entry made
	// under a key since replaced). It wraps ErrEntry.
	ErrForged = fmt.Errorf("%w: MAC does not match this cache's key (forged, or written under another key)", ErrEntry)
	// ErrDisabled: the cache degraded to no cache (full disk, vanished
	// directory, a directory or key that could not be used at open).
	ErrDisabled = errors.New("cache: disabled")
	// errFormat marks an entry of another format version: stale, not bad.
	errFormat = fmt.Errorf("%w: another format version", ErrEntry)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is what an entry says it holds.
type Header struct {
	Fingerprint string
	Pipeline    string
	Split       int
	Sample      uint64
	// Build names the op library and codec that made a finished output
	// (Options.Build); empty for an encoded file, which no build changes.
	Build string
}

// Encode is h's entry file holding payload, authenticated under key.
func Encode(h Header, payload, key []byte) ([]byte, error) {
	if len(h.Fingerprint) > MaxName || len(h.Pipeline) > MaxName || len(h.Build) > MaxName {
		return nil, fmt.Errorf("cache: fingerprint, pipeline id or build over %d bytes", MaxName)
	}
	if len(key) == 0 {
		return nil, errors.New("cache: no key")
	}
	b := make([]byte, headerSize, headerSize+len(h.Fingerprint)+len(h.Pipeline)+len(h.Build)+len(payload)+trailer)
	copy(b, magic)
	le := binary.LittleEndian
	le.PutUint16(b[8:], version)
	le.PutUint32(b[10:], uint32(int32(h.Split)))
	le.PutUint64(b[14:], h.Sample)
	le.PutUint64(b[22:], uint64(len(payload)))
	le.PutUint16(b[30:], uint16(len(h.Fingerprint)))
	le.PutUint16(b[32:], uint16(len(h.Pipeline)))
	le.PutUint16(b[34:], uint16(len(h.Build)))
	b = append(b, h.Fingerprint...)
	b = append(b, h.Pipeline...)
	b = append(b, h.Build...)
	b = append(b, payload...)
	b = append(b, mac(key, b)...)
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// mac is the HMAC-SHA256 of b under key.
func mac(key, b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)
}

// DecodeHeader reads the header at the start of b (at least the header
// and its three names) and the whole entry's size that it announces. It
// checks neither the checksum nor the MAC.
func DecodeHeader(b []byte, maxPayload int64) (h Header, size int64, err error) {
	if len(b) < headerSize {
		return h, 0, fmt.Errorf("%w: %d bytes, shorter than a header", ErrEntry, len(b))
	}
	if string(b[:8]) != magic {
		return h, 0, fmt.Errorf("%w: no magic", ErrEntry)
	}
	le := binary.LittleEndian
	if v := le.Uint16(b[8:]); v != version {
		return h, 0, fmt.Errorf("%w: version %d, want %d", errFormat, v, version)
	}
	h.Split = int(int32(le.Uint32(b[10:])))
	h.Sample = le.Uint64(b[14:])
	n := le.Uint64(b[22:])
	fl, pl, bl := int(le.Uint16(b[30:])), int(le.Uint16(b[32:])), int(le.Uint16(b[34:]))
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	if n > uint64(maxPayload) {
		return h, 0, fmt.Errorf("%w: sample %d: payload %d bytes, limit %d", ErrEntry, h.Sample, n, maxPayload)
	}
	if fl > MaxName || pl > MaxName || bl > MaxName {
		return h, 0, fmt.Errorf("%w: sample %d: names of %d, %d and %d bytes, limit %d", ErrEntry, h.Sample, fl, pl, bl, MaxName)
	}
	if len(b) < headerSize+fl+pl+bl {
		return h, 0, fmt.Errorf("%w: sample %d: truncated header", ErrEntry, h.Sample)
	}
	names := b[headerSize:]
	h.Fingerprint = string(names[:fl])
	h.Pipeline = string(names[fl : fl+pl])
	h.Build = string(names[fl+pl : fl+pl+bl])
	return h, int64(headerSize+fl+pl+bl) + int64(n) + trailer, nil
}

// Decode checks the entry file b (header, length, checksum, then its MAC
// under key) and returns its header and payload (a sub-slice of b). An
// entry whose checksum holds but whose MAC does not gives ErrForged.
func Decode(b, key []byte, maxPayload int64) (Header, []byte, error) {
	h, size, err := DecodeHeader(b, maxPayload)
	if err != nil {
		return h, nil, err
	}
	if int64(len(b)) != size {
		return h, nil, fmt.Errorf("%w: sample %d: %d bytes, header says %d (truncated or extended)", ErrEntry, h.Sample, len(b), size)
	}
	signed := len(b) - trailer
	if got, want := crc32.Checksum(b[:len(b)-4], castagnoli), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return h, nil, fmt.Errorf("%w: sample %d: checksum %08x, entry says %08x", ErrEntry, h.Sample, got, want)
	}
	if len(key) == 0 || !hmac.Equal(mac(key, b[:signed]), b[signed:signed+macSize]) {
		return h, nil, fmt.Errorf("%w: sample %d", ErrForged, h.Sample)
	}
	off := headerSize + len(h.Fingerprint) + len(h.Pipeline) + len(h.Build)
	return h, b[off:signed], nil
}
