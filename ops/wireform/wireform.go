// Package wireform is the wire form of the op library's values: the bytes in
// which an intermediate (an [ops.Value] after ops[0:k]) crosses the link
// between the storage agent and the compute agent, with its optional zstd or
// s2 compression ([Codec]), its checksum, and the limits ([Limits]) under
// which [Decode] refuses a hostile form before allocating. One form carries
// one value.
//
//	offset      size  field
//	0           4     magic "SOPW"
//	4           1     version, 1
//	5           1     kind: 1 encoded, 2 image, 3 tensor, 4 cut (the ops.Kind values)
//	6           1     dtype: 1 uint8, 2 float32 little-endian
//	7           1     codec: 0 none, 1 zstd, 2 s2 (the Codec values)
//	8           1     rank R: 1 for encoded and cut, 3 for image and tensor
//	9           3     reserved, zero
//	12          4*R   dims, uint32 little-endian each:
//	                    encoded [len], cut [len], image [H, W, 3], tensor [C, H, W]
//	12+4R       8     raw length: payload bytes before compression, uint64 LE
//	20+4R       8     stored length: payload bytes that follow, uint64 LE
//	28+4R       4     CRC-32C (Castagnoli) of bytes [0, 28+4R) followed by
//	                    the raw payload, uint32 LE
//	32+4R       S     stored payload: the raw payload, compressed by codec
//
// The header is 36 bytes for an encoded value and 44 for an image or a
// tensor. The kind fixes dtype and rank: encoded is uint8 rank 1, image is
// uint8 rank 3, tensor is float32 rank 3. The raw payload is the value's
// bytes in order: the JPEG bytes, a cut's geometry (the original's W, H and
// the cut's origin X, Y, uint32 LE each) followed by its JPEG bytes, the
// image's Pix (HWC RGB), or the tensor's Data (CHW) as float32
// little-endian, so raw length = product(dims) *
// sizeof(dtype). A zstd payload is one or more zstd frames (RFC 8878); an s2
// payload is one s2 block (github.com/klauspost/compress/s2, block format).
// With codec none, stored length equals raw length. A form is exactly
// header + stored length bytes long; trailing bytes are an error.
//
// Decoding checks the header, refuses a raw length above the caller's limit
// before allocating or decompressing anything, decompresses into a buffer of
// exactly the raw length (so a decompression bomb stops there, give or take
// one zstd block), and then checks the CRC over the header and the raw
// payload. The encoder stores a payload with codec none when the requested
// codec would not make it smaller.
package wireform

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/sophon-dl/sophon/ops"
)

// Errors of the wire form. Callers test them with errors.Is. Encoding a
// value of no wire form (a nil or foreign [ops.Value]) wraps [ops.ErrKind].
var (
	// ErrHeader: a wire form whose header is malformed (magic, version,
	// kind, dtype, rank or dims).
	ErrHeader = errors.New("wireform: bad header")
	// ErrSize: a wire form whose lengths disagree with its header.
	ErrSize = errors.New("wireform: size mismatch")
	// ErrChecksum: the payload does not match its checksum.
	ErrChecksum = errors.New("wireform: checksum mismatch")
	// ErrTooLarge: the declared payload exceeds the decoder's limits
	// (this is how a decompression bomb is refused).
	ErrTooLarge = errors.New("wireform: payload too large")
	// ErrCodec: the compressed payload cannot be decompressed.
	ErrCodec = errors.New("wireform: codec error")
)

// wrapf returns an error that wraps sentinel and adds a formatted detail.
func wrapf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// Codec is the optional lossless compression of a wire payload, chosen per
// call.
type Codec uint8

const (
	// CodecNone stores the payload as is.
	CodecNone Codec = 0
	// CodecZstd compresses the payload with zstd.
	CodecZstd Codec = 1
	// CodecS2 compresses the payload with s2 (a faster Snappy extension).
	CodecS2 Codec = 2
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecZstd:
		return "zstd"
	case CodecS2:
		return "s2"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// ParseCodec returns the codec named s ("none", "zstd" or "s2"). An unknown
// name is an error wrapping [ErrCodec].
func ParseCodec(s string) (Codec, error) {
	switch s {
	case "none":
		return CodecNone, nil
	case "zstd":
		return CodecZstd, nil
	case "s2":
		return CodecS2, nil
	}
	return 0, wrapf(ErrCodec, "unknown codec %q (want none, zstd or s2)", s)
}

// DType is the element type of a wire payload.
type DType uint8

const (
	// DTypeUint8 is one byte per element.
	DTypeUint8 DType = 1
	// DTypeFloat32 is an IEEE 754 float32, little-endian.
	DTypeFloat32 DType = 2
)

func (d DType) String() string {
	switch d {
	case DTypeUint8:
		return "uint8"
	case DTypeFloat32:
		return "float32"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the element size in bytes, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case DTypeUint8:
		return 1
	case DTypeFloat32:
		return 4
	}
	return 0
}

// DefaultMaxPayload is the raw payload limit of a zero [Limits].
const DefaultMaxPayload = 256 << 20

// Limits bound what Decode allocates.
type Limits struct {
	// MaxPayload bounds the decoded payload in bytes. Zero (or negative)
	// means DefaultMaxPayload.
	MaxPayload int
}

func (l Limits) maxPayload() uint64 {
	if l.MaxPayload <= 0 {
		return DefaultMaxPayload
	}
	return uint64(l.MaxPayload)
}

// Info is a parsed and checked wire header.
type Info struct {
	Kind  ops.Kind
	DType DType
	Codec Codec
	// Rank is the number of dims in use: 1 for encoded, 3 otherwise.
	Rank int
	// Dims are the dims as on the wire: encoded [len], image [H, W, 3],
	// tensor [C, H, W]; Dims[Rank:] are zero.
	Dims [maxWireRank]uint32
	// HeaderLen is the header size in bytes, checksum included.
	HeaderLen int
	// RawLen is the payload size before compression.
	RawLen uint64
	// StoredLen is the size of the payload that follows the header.
	StoredLen uint64
	// Checksum is the CRC-32C of the header and the raw payload.
	Checksum uint32
}

// Len is the size of the whole wire form: header and stored payload.
func (i Info) Len() uint64 { return uint64(i.HeaderLen) + i.StoredLen }

func (i Info) String() string {
	return fmt.Sprintf("%s %s %v %s raw=%d stored=%d crc=%08x",
		i.Kind, i.DType, i.Dims[:min(max(i.Rank, 0), maxWireRank)], i.Codec, i.RawLen, i.StoredLen, i.Checksum)
}

const (
	wireMagic    = "SOPW"
	wireVersion  = 1
	wireFixedLen = 12 // magic, version, kind, dtype, codec, rank, reserved
	wireTrailLen = 20 // raw length, stored length, checksum
	maxWireRank  = 3
	wireOffKind  = 5
	wireOffDType = 6
	wireOffCodec = 7
	wireOffRank  = 8
	wireOffDims  = wireFixedLen
	maxWireDim   = math.MaxUint32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// hostLE reports whether float32 memory already is the wire's
// little-endian layout, so tensors cross without a conversion pass.
var hostLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// float32Bytes views d's memory as bytes. Only for little-endian hosts.
func float32Bytes(d []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(d))), len(d)*4)
}

var (
	zstdEncOnce sync.Once
	zstdEnc     *zstd.Encoder
	zstdDecOnce sync.Once
	zstdDec     *zstd.Decoder
)

// zstdEncLevel is the encoder level. On a normalised tensor SpeedFastest
// encodes faster than SpeedDefault for a slightly lower ratio, and uint8
// photos barely compress at either level (BenchmarkWireZstdLevels measures
// both). Encoding runs per sample at link rate, so speed wins.
const zstdEncLevel = zstd.SpeedFastest

// zstdEncoder is shared: EncodeAll is safe for concurrent use.
func zstdEncoder() *zstd.Encoder {
	zstdEncOnce.Do(func() {
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstdEncLevel),
			// The wire CRC already covers the raw payload.
			zstd.WithEncoderCRC(false))
		if err != nil {
			panic("wireform: zstd encoder: " + err.Error()) // the options are constant
		}
		zstdEnc = e
	})
	return zstdEnc
}

// zstdDecoder is shared: DecodeAll is safe for concurrent use. Its output is
// bounded per call, by the capacity of the output buffer
// (WithDecodeAllCapLimit), which Decode sizes to the declared raw length,
// itself within the caller's Limits. The decoder-wide WithDecoderMaxMemory
// is therefore set out of the way: a single value cannot express per-call
// limits.
func zstdDecoder() *zstd.Decoder {
	zstdDecOnce.Do(func() {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecodeAllCapLimit(true),
			zstd.WithDecoderMaxMemory(math.MaxInt64),
			// The wire CRC is checked after decoding.
			zstd.IgnoreChecksum(true))
		if err != nil {
			panic("wireform: zstd decoder: " + err.Error()) // the options are constant
		}
		zstdDec = d
	})
	return zstdDec
}

// wireShape is what the header says about a value, less the lengths.
type wireShape struct {
	kind  ops.Kind
	dtype DType
	rank  int
	dims  [maxWireRank]uint32
}

func (s *wireShape) headerLen() int { return wireFixedLen + 4*s.rank + wireTrailLen }

// wireRaw returns v's shape and raw payload. The payload aliases v when the
// host allows it.
func wireRaw(v ops.Value) (wireShape, []byte, error) {
	var s wireShape
	switch v := v.(type) {
	case ops.Encoded:
		if uint64(len(v)) > maxWireDim {
			return s, nil, wrapf(ErrTooLarge, "encoded value of %d bytes exceeds %d", len(v), uint64(maxWireDim))
		}
		s = wireShape{kind: ops.KindEncoded, dtype: DTypeUint8, rank: 1, dims: [3]uint32{uint32(len(v))}}
		return s, v, nil
	case *ops.Image:
		if v == nil {
			return s, nil, wrapf(ops.ErrKind, "nil *Image")
		}
		if v.W < 0 || v.H < 0 || uint64(v.W) > maxWireDim || uint64(v.H) > maxWireDim {
			return s, nil, wrapf(ErrHeader, "image dims %dx%d out of range", v.W, v.H)
		}
		s = wireShape{kind: ops.KindImage, dtype: DTypeUint8, rank: 3, dims: [3]uint32{uint32(v.H), uint32(v.W), ops.Channels}}
		if n, ok := s.rawLen(); !ok || n != uint64(len(v.Pix)) {
			return s, nil, wrapf(ErrSize, "image %dx%d has %d pixel bytes, want %dx%dx%d", v.W, v.H, len(v.Pix), v.H, v.W, ops.Channels)
		}
		return s, v.Pix, nil
	case *ops.CutJPEG:
		if v == nil {
			return s, nil, wrapf(ops.ErrKind, "nil *CutJPEG")
		}
		raw, err := cutWirePayload(v)
		if err != nil {
			return s, nil, err
		}
		if uint64(len(raw)) > maxWireDim {
			return s, nil, wrapf(ErrTooLarge, "cut of %d bytes exceeds %d", len(raw), uint64(maxWireDim))
		}
		s = wireShape{kind: ops.KindCut, dtype: DTypeUint8, rank: 1, dims: [3]uint32{uint32(len(raw))}}
		return s, raw, nil
	case *ops.Tensor:
		if v == nil {
			return s, nil, wrapf(ops.ErrKind, "nil *Tensor")
		}
		if v.C < 0 || v.H < 0 || v.W < 0 || uint64(v.C) > maxWireDim || uint64(v.H) > maxWireDim || uint64(v.W) > maxWireDim {
			return s, nil, wrapf(ErrHeader, "tensor dims %dx%dx%d out of range", v.C, v.H, v.W)
		}
		s = wireShape{kind: ops.KindTensor, dtype: DTypeFloat32, rank: 3, dims: [3]uint32{uint32(v.C), uint32(v.H), uint32(v.W)}}
		if n, ok := s.rawLen(); !ok || n != uint64(len(v.Data))*4 {
			return s, nil, wrapf(ErrSize, "tensor %dx%dx%d has %d elements", v.C, v.H, v.W, len(v.Data))
		}
		if hostLE {
			return s, float32Bytes(v.Data), nil
		}
		raw := make([]byte, 4*len(v.Data))
		for i, f := range v.Data {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
		}
		return s, raw, nil
	case nil:
		return s, nil, wrapf(ops.ErrKind, "nil value")
	}
	return s, nil, wrapf(ops.ErrKind, "no wire form for %T", v)
}

// rawLen is product(dims) * sizeof(dtype); ok is false on uint64 overflow.
func (s *wireShape) rawLen() (uint64, bool) {
	n := uint64(s.dtype.Size())
	for _, d := range s.dims[:s.rank] {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// Encode is Append(nil, v, c).
func Encode(v ops.Value, c Codec) ([]byte, error) {
	return Append(nil, v, c)
}

// Append appends v's wire form to dst and returns the extended slice. v
// must be an [ops.Encoded], an *[ops.CutJPEG], or an *[ops.Image] or a
// *[ops.Tensor] whose payload length matches its dims. When c would not make the payload smaller (JPEG bytes,
// noise, an empty payload) the form is stored with [CodecNone] instead, which
// the header records; Decode handles either. On error dst is returned
// unchanged in length. NB: v's payload must not lie in dst's spare capacity,
// which Append overwrites.
func Append(dst []byte, v ops.Value, c Codec) ([]byte, error) {
	if c > CodecS2 {
		return dst, wrapf(ErrCodec, "unknown codec %d", uint8(c))
	}
	s, raw, err := wireRaw(v)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	hlen := s.headerLen()
	body := start + hlen

	grow := hlen + len(raw)
	switch c {
	case CodecZstd:
		// Room for what zstd adds to an incompressible payload (raw
		// blocks: 3 bytes per 128 KiB, and the frame header), so that
		// falling back to none does not reallocate.
		grow += len(raw)>>14 + 32
	case CodecS2:
		m := s2.MaxEncodedLen(len(raw))
		if m < 0 {
			return dst, wrapf(ErrTooLarge, "s2 cannot compress %d bytes", len(raw))
		}
		grow = hlen + m
	}
	dst = slices.Grow(dst, grow)[:body]
	h := dst[start:body]
	copy(h, wireMagic)
	h[4] = wireVersion
	h[wireOffKind] = byte(s.kind)
	h[wireOffDType] = byte(s.dtype)
	h[wireOffRank] = byte(s.rank)
	h[9], h[10], h[11] = 0, 0, 0
	for i, d := range s.dims[:s.rank] {
		binary.LittleEndian.PutUint32(h[wireOffDims+4*i:], d)
	}
	off := wireOffDims + 4*s.rank
	binary.LittleEndian.PutUint64(h[off:], uint64(len(raw)))

	switch c {
	case CodecZstd:
		dst = zstdEncoder().EncodeAll(raw, dst)
	case CodecS2:
		out := s2.Encode(dst[body:cap(dst)], raw)
		if unsafe.SliceData(out) != unsafe.SliceData(dst[body:cap(dst)]) {
			// s2 had room; this is only a guard against a change in it.
			dst = append(dst, out...)
		} else {
			dst = dst[:body+len(out)]
		}
	}
	if c == CodecNone || len(dst)-body >= len(raw) {
		c = CodecNone
		dst = append(dst[:body], raw...)
	}

	h = dst[start:body]
	h[wireOffCodec] = byte(c)
	binary.LittleEndian.PutUint64(h[off+8:], uint64(len(dst)-body))
	crc := crc32.Update(0, castagnoli, h[:off+16])
	crc = crc32.Update(crc, castagnoli, raw)
	binary.LittleEndian.PutUint32(h[off+16:], crc)
	return dst, nil
}

// ReadHeader parses and checks the header at the start of b: magic,
// version, kind, dtype, codec, rank, reserved bytes, dims against the raw
// length, and (for codec none) the stored length against the raw length.
// b needs to hold only the header; the payload is neither read nor checked
// (see [Info.Len] for the length of the whole form). Errors wrap
// [ErrHeader] or [ErrSize].
func ReadHeader(b []byte) (Info, error) {
	var info Info
	if len(b) < wireFixedLen {
		return info, wrapf(ErrHeader, "short input: %d bytes, header needs at least %d", len(b), wireFixedLen)
	}
	if string(b[:4]) != wireMagic {
		return info, wrapf(ErrHeader, "magic %q, want %q", b[:4], wireMagic)
	}
	if b[4] != wireVersion {
		return info, wrapf(ErrHeader, "version %d, want %d", b[4], wireVersion)
	}
	info.Kind = ops.Kind(b[wireOffKind])
	info.DType = DType(b[wireOffDType])
	info.Codec = Codec(b[wireOffCodec])
	info.Rank = int(b[wireOffRank])
	var wantDType DType
	var wantRank int
	switch info.Kind {
	case ops.KindEncoded, ops.KindCut:
		wantDType, wantRank = DTypeUint8, 1
	case ops.KindImage:
		wantDType, wantRank = DTypeUint8, 3
	case ops.KindTensor:
		wantDType, wantRank = DTypeFloat32, 3
	default:
		return info, wrapf(ErrHeader, "unknown kind %d", b[wireOffKind])
	}
	if info.DType.Size() == 0 {
		return info, wrapf(ErrHeader, "unknown dtype %d", b[wireOffDType])
	}
	if info.DType != wantDType {
		return info, wrapf(ErrHeader, "dtype %s for kind %s, want %s", info.DType, info.Kind, wantDType)
	}
	if info.Codec > CodecS2 {
		return info, wrapf(ErrHeader, "unknown codec %d", b[wireOffCodec])
	}
	if info.Rank != wantRank {
		return info, wrapf(ErrHeader, "rank %d for kind %s, want %d", info.Rank, info.Kind, wantRank)
	}
	if b[9]|b[10]|b[11] != 0 {
		return info, wrapf(ErrHeader, "reserved bytes % x, want zero", b[9:12])
	}
	info.HeaderLen = wireFixedLen + 4*info.Rank + wireTrailLen
	if len(b) < info.HeaderLen {
		return info, wrapf(ErrHeader, "short input: %d bytes, %s header needs %d", len(b), info.Kind, info.HeaderLen)
	}
	for i := range info.Rank {
		info.Dims[i] = binary.LittleEndian.Uint32(b[wireOffDims+4*i:])
	}
	off := wireOffDims + 4*info.Rank
	info.RawLen = binary.LittleEndian.Uint64(b[off:])
	info.StoredLen = binary.LittleEndian.Uint64(b[off+8:])
	info.Checksum = binary.LittleEndian.Uint32(b[off+16:])

	if info.Kind == ops.KindImage && info.Dims[2] != ops.Channels {
		return info, wrapf(ErrHeader, "image has %d channels, want %d", info.Dims[2], ops.Channels)
	}
	s := wireShape{kind: info.Kind, dtype: info.DType, rank: info.Rank, dims: info.Dims}
	n, ok := s.rawLen()
	if !ok {
		return info, wrapf(ErrHeader, "dims %v of %s overflow", info.Dims[:info.Rank], info.DType)
	}
	if n != info.RawLen {
		return info, wrapf(ErrSize, "raw length %d, dims %v of %s need %d", info.RawLen, info.Dims[:info.Rank], info.DType, n)
	}
	if info.Codec == CodecNone && info.StoredLen != info.RawLen {
		return info, wrapf(ErrSize, "stored length %d with codec none, want raw length %d", info.StoredLen, info.RawLen)
	}
	return info, nil
}

// Decode parses one wire form, which must be all of b. The result never
// aliases b. A raw length above lim is refused with [ErrTooLarge] before
// anything is allocated or decompressed. A compressed payload whose own
// header (zstd frame content size, s2 length prefix) disagrees with the raw
// length is refused before allocating. Otherwise decompression writes into
// a buffer of exactly the raw length: an s2 payload cannot overrun it, and
// a zstd payload that does is stopped within one zstd block (128 KiB), the
// decoder having grown its output at most once (by 1.25x), so a bomb costs
// at most about 2.25x the raw length plus 128 KiB. Errors wrap
// [ErrHeader], [ErrSize], [ErrChecksum], [ErrTooLarge] or
// [ErrCodec].
func Decode(b []byte, lim Limits) (ops.Value, error) {
	info, err := ReadHeader(b)
	if err != nil {
		return nil, err
	}
	if maxRaw := lim.maxPayload(); info.RawLen > maxRaw {
		return nil, wrapf(ErrTooLarge, "raw length %d exceeds limit %d", info.RawLen, maxRaw)
	}
	stored := b[info.HeaderLen:]
	if uint64(len(stored)) != info.StoredLen {
		return nil, wrapf(ErrSize, "%d payload bytes, header says %d", len(stored), info.StoredLen)
	}
	rawLen := int(info.RawLen) // fits: at most lim.MaxPayload
	for _, d := range info.Dims[:info.Rank] {
		if uint64(d) > math.MaxInt { // only where int is 32 bits
			return nil, wrapf(ErrHeader, "dim %d does not fit an int", d)
		}
	}
	if err := wireCheckStored(info.Codec, stored, rawLen); err != nil {
		return nil, err
	}

	// raw is the value's own memory wherever the host allows it.
	var raw []byte
	var tensor *ops.Tensor
	if info.Kind == ops.KindTensor {
		tensor = &ops.Tensor{C: int(info.Dims[0]), H: int(info.Dims[1]), W: int(info.Dims[2]), Data: make([]float32, rawLen/4)}
		if hostLE {
			raw = float32Bytes(tensor.Data)
		} else {
			raw = make([]byte, rawLen)
		}
		if err := wireDecompress(info.Codec, stored, raw); err != nil {
			return nil, err
		}
	} else if info.Codec == CodecNone {
		raw = bytes.Clone(stored) // skips zeroing what it copies
	} else {
		raw = make([]byte, rawLen)
		if err := wireDecompress(info.Codec, stored, raw); err != nil {
			return nil, err
		}
	}
	crc := crc32.Update(0, castagnoli, b[:info.HeaderLen-4])
	crc = crc32.Update(crc, castagnoli, raw)
	if crc != info.Checksum {
		return nil, wrapf(ErrChecksum, "crc32c %08x, header says %08x", crc, info.Checksum)
	}
	switch info.Kind {
	case ops.KindEncoded:
		return ops.Encoded(raw), nil
	case ops.KindCut:
		// NB: not return cutFromWire(raw), whose nil *ops.CutJPEG would make a
		// non-nil ops.Value beside the error.
		c, err := cutFromWire(raw)
		if err != nil {
			return nil, err
		}
		return c, nil
	case ops.KindImage:
		return &ops.Image{W: int(info.Dims[1]), H: int(info.Dims[0]), Pix: raw}, nil
	}
	if !hostLE {
		for i := range tensor.Data {
			tensor.Data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	return tensor, nil
}

// wireCheckStored refuses, before anything is allocated, a compressed
// payload whose own header declares more than rawLen bytes.
func wireCheckStored(c Codec, stored []byte, rawLen int) error {
	switch c {
	case CodecZstd:
		var h zstd.Header
		// A header that does not parse is left to the decoder to report.
		if h.Decode(stored) == nil && !h.Skippable && h.HasFCS && h.FrameContentSize > uint64(rawLen) {
			return wrapf(ErrSize, "zstd frame declares %d bytes, raw length is %d", h.FrameContentSize, rawLen)
		}
	case CodecS2:
		n, err := s2.DecodedLen(stored)
		if err != nil {
			return wrapf(ErrCodec, "s2: %v", err)
		}
		if n != rawLen {
			return wrapf(ErrSize, "s2 payload declares %d bytes, raw length is %d", n, rawLen)
		}
	}
	return nil
}

// wireDecompress fills raw, whose length is the declared raw length, from
// the stored payload.
func wireDecompress(c Codec, stored, raw []byte) error {
	switch c {
	case CodecNone:
		copy(raw, stored) // equal lengths: checked by ReadHeader
		return nil
	case CodecZstd:
		out, err := zstdDecoder().DecodeAll(stored, raw[:0])
		if err != nil {
			if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrFrameSizeExceeded) {
				return wrapf(ErrSize, "zstd payload decodes to more than the raw length %d", len(raw))
			}
			return wrapf(ErrCodec, "zstd: %v", err)
		}
		if len(out) != len(raw) {
			return wrapf(ErrSize, "zstd payload decodes to %d bytes, raw length is %d", len(out), len(raw))
		}
		if len(out) > 0 && unsafe.SliceData(out) != unsafe.SliceData(raw) {
			copy(raw, out) // not reached: the output fits raw's capacity
		}
		return nil
	case CodecS2:
		// wireCheckStored has checked the declared length against raw.
		out, err := s2.Decode(raw, stored)
		if err != nil {
			return wrapf(ErrCodec, "s2: %v", err)
		}
		if len(out) != len(raw) {
			return wrapf(ErrSize, "s2 payload decodes to %d bytes, raw length is %d", len(out), len(raw))
		}
		if len(out) > 0 && unsafe.SliceData(out) != unsafe.SliceData(raw) {
			copy(raw, out) // not reached: s2 decodes into raw when it fits
		}
		return nil
	}
	return wrapf(ErrHeader, "unknown codec %d", uint8(c))
}

// encodedHeaderLen is the header length of an encoded value's form.
const encodedHeaderLen = wireFixedLen + 4 + wireTrailLen

// EncodedLen is the length of the uncompressed wire form of an n-byte
// [ops.Encoded] value: what [NewEncoded] allocates and a raw fetch sends.
func EncodedLen(n int) int { return encodedHeaderLen + n }

// NewEncoded returns the uncompressed wire form of an n-byte [ops.Encoded]
// value with its header written, and payload, the part of form that holds
// the value's bytes. The caller fills payload (a file read straight into
// it, say) and then calls [Seal]: one allocation and no copy, where
// Encode would copy the bytes. The result equals Encode(value,
// CodecNone).
func NewEncoded(n int) (form, payload []byte, err error) {
	if n < 0 || uint64(n) > math.MaxUint32 {
		return nil, nil, wrapf(ErrHeader, "encoded length %d does not fit a uint32 dim", n)
	}
	form = make([]byte, encodedHeaderLen+n)
	h := form[:encodedHeaderLen]
	copy(h, wireMagic)
	h[4] = wireVersion
	h[wireOffKind] = byte(ops.KindEncoded)
	h[wireOffDType] = byte(DTypeUint8)
	h[wireOffCodec] = byte(CodecNone)
	h[wireOffRank] = 1
	binary.LittleEndian.PutUint32(h[wireOffDims:], uint32(n))
	off := wireOffDims + 4
	binary.LittleEndian.PutUint64(h[off:], uint64(n))
	binary.LittleEndian.PutUint64(h[off+8:], uint64(n))
	return form, form[encodedHeaderLen:], nil
}

// Seal writes the checksum of a form made by [NewEncoded] once its
// payload holds the value's bytes.
func Seal(form []byte) {
	off := wireOffDims + 4
	crc := crc32.Update(0, castagnoli, form[:off+16])
	crc = crc32.Update(crc, castagnoli, form[encodedHeaderLen:])
	binary.LittleEndian.PutUint32(form[off+16:], crc)
}

// Check validates a wire form exactly as Decode does (header,
// limits, lengths, checksum) without building the value: an uncompressed
// payload is checksummed in place, with no allocation or copy. It serves
// callers that only move or count intermediates, such as a link test.
func Check(b []byte, lim Limits) (Info, error) {
	info, err := ReadHeader(b)
	if err != nil {
		return info, err
	}
	if info.Codec != CodecNone {
		_, err := Decode(b, lim)
		return info, err
	}
	if maxRaw := lim.maxPayload(); info.RawLen > maxRaw {
		return info, wrapf(ErrTooLarge, "raw length %d exceeds limit %d", info.RawLen, maxRaw)
	}
	stored := b[info.HeaderLen:]
	if uint64(len(stored)) != info.StoredLen {
		return info, wrapf(ErrSize, "%d payload bytes, header says %d", len(stored), info.StoredLen)
	}
	crc := crc32.Update(0, castagnoli, b[:info.HeaderLen-4])
	crc = crc32.Update(crc, castagnoli, stored)
	if crc != info.Checksum {
		return info, wrapf(ErrChecksum, "crc32c %08x, header says %08x", crc, info.Checksum)
	}
	return info, nil
}

// cutGeomLen is the geometry prefix of a cut's raw payload: W, H, X, Y as
// uint32 little-endian ([ops.CutJPEG.Size] counts it too; TestWireCut
// checks that the two agree).
const cutGeomLen = 16

// cutWirePayload is a cut's raw wire payload: the geometry, then the file.
func cutWirePayload(c *ops.CutJPEG) ([]byte, error) {
	for _, d := range []int{c.W, c.H, c.X, c.Y} {
		if d < 0 || uint64(d) > maxWireDim {
			return nil, wrapf(ErrHeader, "cut geometry %dx%d+%d+%d out of range", c.W, c.H, c.X, c.Y)
		}
	}
	// What cutFromWire refuses, refuse here.
	if c.W < 1 || c.H < 1 || c.X >= c.W || c.Y >= c.H {
		return nil, wrapf(ErrHeader, "cut geometry %dx%d+%d+%d: the origin must lie inside the image", c.W, c.H, c.X, c.Y)
	}
	b := make([]byte, cutGeomLen+len(c.Data))
	binary.LittleEndian.PutUint32(b[0:], uint32(c.W))
	binary.LittleEndian.PutUint32(b[4:], uint32(c.H))
	binary.LittleEndian.PutUint32(b[8:], uint32(c.X))
	binary.LittleEndian.PutUint32(b[12:], uint32(c.Y))
	copy(b[cutGeomLen:], c.Data)
	return b, nil
}

// cutFromWire parses a cut's raw wire payload; it aliases raw.
func cutFromWire(raw []byte) (*ops.CutJPEG, error) {
	if len(raw) < cutGeomLen {
		return nil, wrapf(ErrSize, "cut payload of %d bytes, the geometry alone is %d", len(raw), cutGeomLen)
	}
	c := &ops.CutJPEG{
		W:    int(binary.LittleEndian.Uint32(raw[0:])),
		H:    int(binary.LittleEndian.Uint32(raw[4:])),
		X:    int(binary.LittleEndian.Uint32(raw[8:])),
		Y:    int(binary.LittleEndian.Uint32(raw[12:])),
		Data: raw[cutGeomLen:],
	}
	if c.W < 1 || c.H < 1 || c.X >= c.W || c.Y >= c.H {
		return nil, wrapf(ErrHeader, "cut geometry %dx%d+%d+%d: the origin must lie inside the image", c.W, c.H, c.X, c.Y)
	}
	return c, nil
}
