package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// An entry file is one sample at one split:
//
//	offset  size  field
//	0       8     magic "SPHXCACH"
//	8       2     version (1), little-endian like every field
//	10      4     split (int32: 0 the encoded file, n the finished output)
//	14      8     sample id
//	22      8     payload length
//	30      2     fingerprint length (at most MaxName)
//	32      2     pipeline id length (at most MaxName)
//	34      ...   fingerprint, pipeline id, payload
//	end-4   4     CRC-32C of every byte before it
//
// Decode checks all of it before it returns the payload; the fetch engine
// also checks a raw payload against the catalog's content hash.
const (
	magic      = "SPHXCACH"
	version    = 1
	headerSize = 34
	trailer    = 4
	// MaxName bounds an entry's fingerprint and pipeline id.
	MaxName = 1024
	// DefaultMaxPayload bounds an entry's payload when Options.MaxPayload
	// is zero.
	DefaultMaxPayload = 1 << 30
)

// Errors of the cache. ErrEntry marks an entry that is not what it should
// be (corrupt, truncated, foreign, stale): it is dropped and the sample
// fetched again.
var (
	ErrEntry = errors.New("cache: bad entry")
	// ErrDisabled: the cache degraded to no cache (full disk, vanished
	// directory) or was never opened.
	ErrDisabled = errors.New("cache: disabled")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is what an entry says it holds.
type Header struct {
	Fingerprint string
	Pipeline    string
	Split       int
	Sample      uint64
}

// Encode is h's entry file holding payload.
func Encode(h Header, payload []byte) ([]byte, error) {
	if len(h.Fingerprint) > MaxName || len(h.Pipeline) > MaxName {
		return nil, fmt.Errorf("cache: fingerprint or pipeline id over %d bytes", MaxName)
	}
	b := make([]byte, headerSize, headerSize+len(h.Fingerprint)+len(h.Pipeline)+len(payload)+trailer)
	copy(b, magic)
	le := binary.LittleEndian
	le.PutUint16(b[8:], version)
	le.PutUint32(b[10:], uint32(int32(h.Split)))
	le.PutUint64(b[14:], h.Sample)
	le.PutUint64(b[22:], uint64(len(payload)))
	le.PutUint16(b[30:], uint16(len(h.Fingerprint)))
	le.PutUint16(b[32:], uint16(len(h.Pipeline)))
	b = append(b, h.Fingerprint...)
	b = append(b, h.Pipeline...)
	b = append(b, payload...)
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// DecodeHeader reads the header at the start of b (at least the header
// and its two names) and the whole entry's size that it announces. It
// does not check the checksum.
func DecodeHeader(b []byte, maxPayload int64) (h Header, size int64, err error) {
	if len(b) < headerSize {
		return h, 0, fmt.Errorf("%w: %d bytes, shorter than a header", ErrEntry, len(b))
	}
	if string(b[:8]) != magic {
		return h, 0, fmt.Errorf("%w: no magic", ErrEntry)
	}
	le := binary.LittleEndian
	if v := le.Uint16(b[8:]); v != version {
		return h, 0, fmt.Errorf("%w: version %d, want %d", ErrEntry, v, version)
	}
	h.Split = int(int32(le.Uint32(b[10:])))
	h.Sample = le.Uint64(b[14:])
	n := le.Uint64(b[22:])
	fl, pl := int(le.Uint16(b[30:])), int(le.Uint16(b[32:]))
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	if n > uint64(maxPayload) {
		return h, 0, fmt.Errorf("%w: sample %d: payload %d bytes, limit %d", ErrEntry, h.Sample, n, maxPayload)
	}
	if fl > MaxName || pl > MaxName {
		return h, 0, fmt.Errorf("%w: sample %d: names of %d and %d bytes, limit %d", ErrEntry, h.Sample, fl, pl, MaxName)
	}
	if len(b) < headerSize+fl+pl {
		return h, 0, fmt.Errorf("%w: sample %d: truncated header", ErrEntry, h.Sample)
	}
	h.Fingerprint = string(b[headerSize : headerSize+fl])
	h.Pipeline = string(b[headerSize+fl : headerSize+fl+pl])
	return h, int64(headerSize+fl+pl) + int64(n) + trailer, nil
}

// Decode checks the entry file b (header, length, checksum) and returns
// its header and payload (a sub-slice of b).
func Decode(b []byte, maxPayload int64) (Header, []byte, error) {
	h, size, err := DecodeHeader(b, maxPayload)
	if err != nil {
		return h, nil, err
	}
	if int64(len(b)) != size {
		return h, nil, fmt.Errorf("%w: sample %d: %d bytes, header says %d (truncated or extended)", ErrEntry, h.Sample, len(b), size)
	}
	body := b[:len(b)-trailer]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(body):]); got != want {
		return h, nil, fmt.Errorf("%w: sample %d: checksum %08x, entry says %08x", ErrEntry, h.Sample, got, want)
	}
	off := headerSize + len(h.Fingerprint) + len(h.Pipeline)
	return h, body[off:], nil
}
