package wireform_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/jpeg"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

var wireCodecs = []wireform.Codec{wireform.CodecNone, wireform.CodecZstd, wireform.CodecS2}

var wireSentinels = []error{wireform.ErrHeader, wireform.ErrSize, wireform.ErrChecksum, wireform.ErrTooLarge, wireform.ErrCodec}

// wirePhoto is a deterministic photo-like image: smooth colour gradients and
// low-frequency waves under pixel noise of +-noise.
func wirePhoto(w, h int, noise int, seed uint64) *ops.Image {
	m := ops.NewImage(w, h)
	r := rand.New(rand.NewPCG(seed, 0x50484f544f))
	for y := range h {
		fy := float64(y) / float64(max(h, 1))
		for x := range w {
			fx := float64(x) / float64(max(w, 1))
			c := [3]float64{
				40 + 180*fx,
				30 + 200*fy*fy,
				128 + 90*math.Sin(7*fx+3*fy)*math.Cos(4*fy),
			}
			p := m.Pix[(y*w+x)*3:]
			for ch := range 3 {
				v := c[ch]
				if noise > 0 {
					v += float64(r.IntN(2*noise+1) - noise)
				}
				p[ch] = uint8(math.Max(0, math.Min(255, math.Round(v))))
			}
		}
	}
	return m
}

// wireTensor is m normalised to CHW float32, as a ToTensor+Normalize would.
func wireTensor(m *ops.Image) *ops.Tensor {
	mean := [3]float32{0.485, 0.456, 0.406}
	std := [3]float32{0.229, 0.224, 0.225}
	t := ops.NewTensor(3, m.H, m.W)
	for c := range 3 {
		for i := range m.W * m.H {
			t.Data[c*m.W*m.H+i] = (float32(m.Pix[3*i+c])/255 - mean[c]) / std[c]
		}
	}
	return t
}

// wireJPEG encodes m as a JPEG.
func wireJPEG(m *ops.Image, quality int) ops.Encoded {
	rgba := image.NewRGBA(image.Rect(0, 0, m.W, m.H))
	for i := range m.W * m.H {
		copy(rgba.Pix[4*i:], m.Pix[3*i:3*i+3])
		rgba.Pix[4*i+3] = 255
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, rgba, &jpeg.Options{Quality: quality}); err != nil {
		panic(err) // not reached: writing to memory does not fail
	}
	return buf.Bytes()
}

// wireSpecialTensor holds the float32 bit patterns a conversion could lose:
// NaN payloads (quiet and signalling, both signs), signed zeros, infinities,
// subnormals and the extremes.
func wireSpecialTensor() *ops.Tensor {
	bitsList := []uint32{
		0x7fc00000, 0x7fc00001, 0xffc12345, 0x7f800001, 0xff800002, 0x7fbfffff,
		0x00000000, 0x80000000, 0x7f800000, 0xff800000,
		0x00000001, 0x807fffff, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000,
	}
	t := ops.NewTensor(2, 3, 7)
	for i := range t.Data {
		if i < len(bitsList) {
			t.Data[i] = math.Float32frombits(bitsList[i])
		} else {
			t.Data[i] = float32(i) * -0.37
		}
	}
	return t
}

// wireEqual reports whether a and b are the same value, tensors compared
// bit for bit.
func wireEqual(a, b ops.Value) error {
	if a.Kind() != b.Kind() {
		return fmt.Errorf("kind %s, want %s", b.Kind(), a.Kind())
	}
	switch a := a.(type) {
	case ops.Encoded:
		if !bytes.Equal(a, b.(ops.Encoded)) {
			return errors.New("encoded bytes differ")
		}
	case *ops.Image:
		b := b.(*ops.Image)
		if a.W != b.W || a.H != b.H {
			return fmt.Errorf("image %dx%d, want %dx%d", b.W, b.H, a.W, a.H)
		}
		if !bytes.Equal(a.Pix, b.Pix) {
			return errors.New("pixels differ")
		}
	case *ops.CutJPEG:
		b := b.(*ops.CutJPEG)
		if a.W != b.W || a.H != b.H || a.X != b.X || a.Y != b.Y {
			return fmt.Errorf("cut of %dx%d at %d,%d, want %dx%d at %d,%d", b.W, b.H, b.X, b.Y, a.W, a.H, a.X, a.Y)
		}
		if !bytes.Equal(a.Data, b.Data) {
			return errors.New("cut bytes differ")
		}
	case *ops.Tensor:
		b := b.(*ops.Tensor)
		if a.C != b.C || a.H != b.H || a.W != b.W {
			return fmt.Errorf("tensor %dx%dx%d, want %dx%dx%d", b.C, b.H, b.W, a.C, a.H, a.W)
		}
		if len(a.Data) != len(b.Data) {
			return fmt.Errorf("%d elements, want %d", len(b.Data), len(a.Data))
		}
		for i := range a.Data {
			if x, y := math.Float32bits(a.Data[i]), math.Float32bits(b.Data[i]); x != y {
				return fmt.Errorf("element %d: bits %08x, want %08x", i, y, x)
			}
		}
	}
	return nil
}

// wireRawBytes is v's raw wire payload.
func wireRawBytes(v ops.Value) []byte {
	switch v := v.(type) {
	case ops.Encoded:
		return v
	case *ops.Image:
		return v.Pix
	case *ops.CutJPEG:
		return wireCutPayload(v.W, v.H, v.X, v.Y, v.Data)
	case *ops.Tensor:
		b := make([]byte, 4*len(v.Data))
		for i, f := range v.Data {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		}
		return b
	}
	return nil
}

func wireValues() map[string]ops.Value {
	photo := wirePhoto(64, 48, 6, 1)
	rnd := make([]byte, 5000)
	r := rand.New(rand.NewPCG(2, 3))
	for i := range rnd {
		rnd[i] = byte(r.Uint32())
	}
	return map[string]ops.Value{
		"encoded/empty":  ops.Encoded{},
		"encoded/tiny":   ops.Encoded{0xff, 0xd8, 0xff},
		"encoded/jpeg":   wireJPEG(photo, 90),
		"encoded/random": ops.Encoded(rnd),
		"encoded/zeros":  make(ops.Encoded, 100000),
		"cut/jpeg":       &ops.CutJPEG{W: 640, H: 480, X: 32, Y: 16, Data: wireJPEG(photo, 90)},
		"cut/no-data":    &ops.CutJPEG{W: 1, H: 1, Data: []byte{}},
		"cut/max-dims":   &ops.CutJPEG{W: 1<<32 - 1, H: 1<<32 - 1, X: 1<<32 - 2, Y: 1<<32 - 2, Data: rnd[:100]},
		"image/0x0":      ops.NewImage(0, 0),
		"image/5x0":      ops.NewImage(5, 0),
		"image/1x1":      &ops.Image{W: 1, H: 1, Pix: []uint8{1, 2, 3}},
		"image/photo":    photo,
		"image/odd":      wirePhoto(37, 23, 20, 4),
		"tensor/0x0x0":   ops.NewTensor(0, 0, 0),
		"tensor/3x0x4":   ops.NewTensor(3, 0, 4),
		"tensor/special": wireSpecialTensor(),
		"tensor/photo":   wireTensor(photo),
		"tensor/zeros":   ops.NewTensor(3, 50, 50),
	}
}

func TestWireRoundTrip(t *testing.T) {
	for name, v := range wireValues() {
		for _, c := range wireCodecs {
			t.Run(name+"/"+c.String(), func(t *testing.T) {
				b, err := wireform.Encode(v, c)
				if err != nil {
					t.Fatalf("Encode: %v", err)
				}
				info, err := wireform.ReadHeader(b)
				if err != nil {
					t.Fatalf("ReadHeader: %v", err)
				}
				if info.Kind != v.Kind() || info.RawLen != uint64(v.Size()) || info.Len() != uint64(len(b)) {
					t.Fatalf("header %v for %s of %d bytes in %d bytes", info, v.Kind(), v.Size(), len(b))
				}
				if info.Codec != c && info.Codec != wireform.CodecNone {
					t.Fatalf("codec %s, want %s or none", info.Codec, c)
				}
				if info.Codec != wireform.CodecNone && info.StoredLen >= info.RawLen {
					t.Fatalf("stored %d >= raw %d with codec %s", info.StoredLen, info.RawLen, info.Codec)
				}
				got, err := wireform.Decode(b, wireform.Limits{})
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if err := wireEqual(v, got); err != nil {
					t.Fatal(err)
				}
				// The result must not alias the input.
				clear(b)
				if err := wireEqual(v, got); err != nil {
					t.Fatalf("after clearing the input: %v", err)
				}

				// Append keeps the prefix and appends the same bytes.
				prefix := []byte("prefix")
				b2, err := wireform.Append(prefix, v, c)
				if err != nil {
					t.Fatalf("Append: %v", err)
				}
				b3, _ := wireform.Encode(v, c)
				if string(b2[:len(prefix)]) != "prefix" || !bytes.Equal(b2[len(prefix):], b3) {
					t.Fatal("Append differs from Encode after the prefix")
				}
			})
		}
	}
}

// TestWireCodecChoice checks that compressible payloads keep the requested
// codec and incompressible ones fall back to none.
func TestWireCodecChoice(t *testing.T) {
	vals := wireValues()
	for _, tc := range []struct {
		name string
		want map[wireform.Codec]wireform.Codec
	}{
		{"tensor/photo", map[wireform.Codec]wireform.Codec{wireform.CodecZstd: wireform.CodecZstd, wireform.CodecS2: wireform.CodecS2}},
		{"encoded/zeros", map[wireform.Codec]wireform.Codec{wireform.CodecZstd: wireform.CodecZstd, wireform.CodecS2: wireform.CodecS2}},
		{"tensor/zeros", map[wireform.Codec]wireform.Codec{wireform.CodecZstd: wireform.CodecZstd, wireform.CodecS2: wireform.CodecS2}},
		{"encoded/random", map[wireform.Codec]wireform.Codec{wireform.CodecZstd: wireform.CodecNone, wireform.CodecS2: wireform.CodecNone}},
		{"encoded/empty", map[wireform.Codec]wireform.Codec{wireform.CodecZstd: wireform.CodecNone, wireform.CodecS2: wireform.CodecNone}},
	} {
		for c, want := range tc.want {
			b, err := wireform.Encode(vals[tc.name], c)
			if err != nil {
				t.Fatal(err)
			}
			info, err := wireform.ReadHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			if info.Codec != want {
				t.Errorf("%s with %s: got codec %s, want %s", tc.name, c, info.Codec, want)
			}
		}
	}
}

func TestParseCodec(t *testing.T) {
	for _, c := range wireCodecs {
		got, err := wireform.ParseCodec(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCodec(%q) = %v, %v, want %v", c.String(), got, err, c)
		}
	}
	for _, s := range []string{"", "gzip", "ZSTD", "codec(3)"} {
		if _, err := wireform.ParseCodec(s); !errors.Is(err, wireform.ErrCodec) {
			t.Errorf("ParseCodec(%q) error %v, want %v", s, err, wireform.ErrCodec)
		}
	}
	if got := wireform.Codec(7).String(); got != "codec(7)" {
		t.Errorf("Codec(7).String() = %q", got)
	}
}

// wireHugeDim is beyond uint32 where int is 64 bits; where it is 32 bits it
// fits and the image is then short of pixels.
const wireHugeDim = math.MaxInt

var wireHugeDimErr = map[bool]error{true: wireform.ErrHeader, false: wireform.ErrSize}[wireHugeDim > math.MaxUint32]

func TestEncodeInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    ops.Value
		c    wireform.Codec
		want error
	}{
		{"nil", nil, wireform.CodecNone, ops.ErrKind},
		{"nil image", (*ops.Image)(nil), wireform.CodecNone, ops.ErrKind},
		{"nil tensor", (*ops.Tensor)(nil), wireform.CodecZstd, ops.ErrKind},
		{"short pix", &ops.Image{W: 2, H: 2, Pix: make([]uint8, 11)}, wireform.CodecNone, wireform.ErrSize},
		{"long pix", &ops.Image{W: 2, H: 2, Pix: make([]uint8, 13)}, wireform.CodecS2, wireform.ErrSize},
		{"negative width", &ops.Image{W: -1, H: 2}, wireform.CodecNone, wireform.ErrHeader},
		{"width beyond uint32", &ops.Image{W: wireHugeDim, H: 1}, wireform.CodecNone, wireHugeDimErr},
		{"short data", &ops.Tensor{C: 1, H: 2, W: 2, Data: make([]float32, 3)}, wireform.CodecNone, wireform.ErrSize},
		{"overflowing tensor", &ops.Tensor{C: 1 << 30, H: 1 << 30, W: 1 << 30}, wireform.CodecNone, wireform.ErrSize},
		{"unknown codec", ops.Encoded{1}, wireform.Codec(3), wireform.ErrCodec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("keep")
			out, err := wireform.Append(dst, tc.v, tc.c)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed to %q", out)
			}
		})
	}
}

// wireForm builds a wire form field by field, so tests can write any header.
type wireForm struct {
	magic    string
	version  byte
	kind     byte
	dtype    byte
	codec    byte
	rank     byte
	reserved [3]byte
	dims     []uint32
	rawLen   uint64
	// storedLen overrides len(stored) when non-nil.
	storedLen *uint64
	// crcRaw is what the checksum covers after the header.
	crcRaw []byte
	// crc overrides the checksum when non-nil.
	crc    *uint32
	stored []byte
}

func (f wireForm) bytes() []byte {
	b := []byte(f.magic)
	b = append(b, f.version, f.kind, f.dtype, f.codec, f.rank)
	b = append(b, f.reserved[:]...)
	for _, d := range f.dims {
		b = binary.LittleEndian.AppendUint32(b, d)
	}
	b = binary.LittleEndian.AppendUint64(b, f.rawLen)
	stored := uint64(len(f.stored))
	if f.storedLen != nil {
		stored = *f.storedLen
	}
	b = binary.LittleEndian.AppendUint64(b, stored)
	tab := crc32.MakeTable(crc32.Castagnoli)
	crc := crc32.Update(crc32.Checksum(b, tab), tab, f.crcRaw)
	if f.crc != nil {
		crc = *f.crc
	}
	b = binary.LittleEndian.AppendUint32(b, crc)
	return append(b, f.stored...)
}

// wireImageForm is the form of a 4x3 image with the given raw payload,
// stored as is.
func wireImageForm(pix []byte) wireForm {
	return wireForm{
		magic: "SOPW", version: 1, kind: 2, dtype: 1, codec: 0, rank: 3,
		dims: []uint32{3, 4, 3}, rawLen: uint64(len(pix)), crcRaw: pix, stored: pix,
	}
}

// TestWireLayout checks the documented layout byte for byte against the
// encoder.
func TestWireLayout(t *testing.T) {
	m := wirePhoto(4, 3, 10, 9)
	got, err := wireform.Encode(m, wireform.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	if want := wireImageForm(m.Pix).bytes(); !bytes.Equal(got, want) {
		t.Fatalf("image form\n got % x\nwant % x", got, want)
	}
	if len(got)-len(m.Pix) != 44 {
		t.Fatalf("image header %d bytes, want 44", len(got)-len(m.Pix))
	}

	e := ops.Encoded("jpeg bytes")
	got, err = wireform.Encode(e, wireform.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	want := wireForm{magic: "SOPW", version: 1, kind: 1, dtype: 1, rank: 1, dims: []uint32{10},
		rawLen: 10, crcRaw: e, stored: e}.bytes()
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded form\n got % x\nwant % x", got, want)
	}
	if len(got)-len(e) != 36 {
		t.Fatalf("encoded header %d bytes, want 36", len(got)-len(e))
	}

	ts := wireSpecialTensor()
	raw := wireRawBytes(ts)
	got, err = wireform.Encode(ts, wireform.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	want = wireForm{magic: "SOPW", version: 1, kind: 3, dtype: 2, rank: 3, dims: []uint32{2, 3, 7},
		rawLen: uint64(len(raw)), crcRaw: raw, stored: raw}.bytes()
	if !bytes.Equal(got, want) {
		t.Fatalf("tensor form\n got % x\nwant % x", got, want)
	}
}

func TestDecodeBad(t *testing.T) {
	pix := wirePhoto(4, 3, 10, 5).Pix
	valid := wireImageForm(pix).bytes()
	const hlen = 44
	zstdFrame := zstdEncode(t, pix)
	s2Block := s2.Encode(nil, bytes.Repeat(pix, 4))
	u64 := func(v uint64) *uint64 { return &v }
	u32 := func(v uint32) *uint32 { return &v }
	mod := func(f func(*wireForm)) []byte {
		w := wireImageForm(pix)
		f(&w)
		return w.bytes()
	}
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i] ^= 0x10
		return b
	}

	type tcase struct {
		name string
		in   []byte
		lim  wireform.Limits
		want error
	}
	cases := []tcase{
		{"empty", nil, wireform.Limits{}, wireform.ErrHeader},
		{"bad magic", mod(func(w *wireForm) { w.magic = "SOPX" }), wireform.Limits{}, wireform.ErrHeader},
		{"version 0", mod(func(w *wireForm) { w.version = 0 }), wireform.Limits{}, wireform.ErrHeader},
		{"version 2", mod(func(w *wireForm) { w.version = 2 }), wireform.Limits{}, wireform.ErrHeader},
		{"kind 0", mod(func(w *wireForm) { w.kind = 0 }), wireform.Limits{}, wireform.ErrHeader},
		{"kind 4", mod(func(w *wireForm) { w.kind = 4 }), wireform.Limits{}, wireform.ErrHeader},
		{"kind tensor, dtype uint8", mod(func(w *wireForm) { w.kind = 3 }), wireform.Limits{}, wireform.ErrHeader},
		{"kind encoded, rank 3", mod(func(w *wireForm) { w.kind = 1 }), wireform.Limits{}, wireform.ErrHeader},
		{"dtype 0", mod(func(w *wireForm) { w.dtype = 0 }), wireform.Limits{}, wireform.ErrHeader},
		{"dtype 3", mod(func(w *wireForm) { w.dtype = 3 }), wireform.Limits{}, wireform.ErrHeader},
		{"image of float32", mod(func(w *wireForm) { w.dtype = 2 }), wireform.Limits{}, wireform.ErrHeader},
		{"codec 3", mod(func(w *wireForm) { w.codec = 3 }), wireform.Limits{}, wireform.ErrHeader},
		{"codec 255", mod(func(w *wireForm) { w.codec = 255 }), wireform.Limits{}, wireform.ErrHeader},
		{"rank 0", mod(func(w *wireForm) { w.rank, w.dims = 0, nil }), wireform.Limits{}, wireform.ErrHeader},
		{"rank 1", mod(func(w *wireForm) { w.rank, w.dims = 1, []uint32{36} }), wireform.Limits{}, wireform.ErrHeader},
		{"rank 5", mod(func(w *wireForm) { w.rank, w.dims = 5, []uint32{3, 4, 3, 1, 1} }), wireform.Limits{}, wireform.ErrHeader},
		{"reserved 0", mod(func(w *wireForm) { w.reserved[0] = 1 }), wireform.Limits{}, wireform.ErrHeader},
		{"reserved 1", mod(func(w *wireForm) { w.reserved[1] = 0x80 }), wireform.Limits{}, wireform.ErrHeader},
		{"reserved 2", mod(func(w *wireForm) { w.reserved[2] = 1 }), wireform.Limits{}, wireform.ErrHeader},
		{"image of 4 channels", mod(func(w *wireForm) { w.dims = []uint32{3, 3, 4} }), wireform.Limits{}, wireform.ErrHeader},
		{"image of 1 channel", mod(func(w *wireForm) { w.dims = []uint32{6, 6, 1} }), wireform.Limits{}, wireform.ErrHeader},
		{"dims overflow", wireForm{magic: "SOPW", version: 1, kind: 3, dtype: 2, rank: 3,
			dims: []uint32{math.MaxUint32, math.MaxUint32, math.MaxUint32}, rawLen: 36}.bytes(), wireform.Limits{}, wireform.ErrHeader},
		{"dims overflow by dtype", wireForm{magic: "SOPW", version: 1, kind: 3, dtype: 2, rank: 3,
			dims: []uint32{1 << 31, 1 << 31, 1 << 2}, rawLen: 0}.bytes(), wireform.Limits{}, wireform.ErrHeader},
		{"raw length short of dims", mod(func(w *wireForm) { w.rawLen-- }), wireform.Limits{}, wireform.ErrSize},
		{"raw length beyond dims", mod(func(w *wireForm) { w.rawLen = 1 << 62 }), wireform.Limits{}, wireform.ErrSize},
		{"dims beyond payload", mod(func(w *wireForm) { w.dims = []uint32{3, 5, 3} }), wireform.Limits{}, wireform.ErrSize},
		{"codec none, stored != raw", mod(func(w *wireForm) { w.storedLen = u64(35) }), wireform.Limits{}, wireform.ErrSize},
		{"stored length huge", mod(func(w *wireForm) { w.codec, w.storedLen = 1, u64(1<<63) }), wireform.Limits{}, wireform.ErrSize},
		{"stored length max", mod(func(w *wireForm) { w.codec, w.storedLen = 2, u64(math.MaxUint64) }), wireform.Limits{}, wireform.ErrSize},
		{"trailing byte", append(bytes.Clone(valid), 0), wireform.Limits{}, wireform.ErrSize},
		{"payload byte flipped", flip(valid, hlen+7), wireform.Limits{}, wireform.ErrChecksum},
		{"last payload byte flipped", flip(valid, len(valid)-1), wireform.Limits{}, wireform.ErrChecksum},
		{"checksum flipped", flip(valid, hlen-1), wireform.Limits{}, wireform.ErrChecksum},
		{"H and W swapped", mod(func(w *wireForm) { w.crc = u32(binary.LittleEndian.Uint32(valid[hlen-4:])); w.dims = []uint32{4, 3, 3} }), wireform.Limits{}, wireform.ErrChecksum},
		{"over the limit", valid, wireform.Limits{MaxPayload: len(pix) - 1}, wireform.ErrTooLarge},
		{"zstd garbage", mod(func(w *wireForm) { w.codec, w.stored = 1, []byte("not a zstd frame") }), wireform.Limits{}, wireform.ErrCodec},
		{"zstd short output", mod(func(w *wireForm) { w.codec, w.stored = 1, zstdEncode(t, pix[:30]) }), wireform.Limits{}, wireform.ErrSize},
		{"zstd long output", mod(func(w *wireForm) { w.codec, w.stored = 1, zstdEncode(t, append(bytes.Clone(pix), 1)) }), wireform.Limits{}, wireform.ErrSize},
		{"zstd truncated", mod(func(w *wireForm) { w.codec, w.stored = 1, zstdFrame[:len(zstdFrame)-1] }), wireform.Limits{}, wireform.ErrCodec},
		{"s2 garbage", mod(func(w *wireForm) { w.codec, w.stored = 2, []byte{36, 0xff, 0xff, 0xff} }), wireform.Limits{}, wireform.ErrCodec},
		{"s2 bad varint", mod(func(w *wireForm) { w.codec, w.stored = 2, []byte{0xff, 0xff} }), wireform.Limits{}, wireform.ErrCodec},
		{"s2 longer output", mod(func(w *wireForm) { w.codec, w.stored = 2, s2Block }), wireform.Limits{}, wireform.ErrSize},
	}
	for i := range hlen {
		cases = append(cases, tcase{fmt.Sprintf("header cut at %d", i), valid[:i], wireform.Limits{}, wireform.ErrHeader})
	}
	for i := hlen; i < len(valid); i += 5 {
		cases = append(cases, tcase{fmt.Sprintf("payload cut at %d", i), valid[:i], wireform.Limits{}, wireform.ErrSize})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := wireform.Decode(tc.in, tc.lim)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if v != nil {
				t.Fatalf("got value %v with error", v)
			}
			t.Log(err)
		})
	}
}

// TestDecodeFlippedCompressed flips bits in every byte of a compressed
// form: each must fail cleanly or, where the bits do not matter, decode
// exactly.
func TestDecodeFlippedCompressed(t *testing.T) {
	m := wireTensor(wirePhoto(20, 15, 3, 8))
	for _, c := range []wireform.Codec{wireform.CodecZstd, wireform.CodecS2} {
		b, err := wireform.Encode(m, c)
		if err != nil {
			t.Fatal(err)
		}
		info, err := wireform.ReadHeader(b)
		if err != nil || info.Codec != c {
			t.Fatalf("%s: %v %v", c, info, err)
		}
		counts := map[string]int{}
		for i := info.HeaderLen; i < len(b); i++ {
			for _, mask := range []byte{0x01, 0x80, 0xff} {
				bad := bytes.Clone(b)
				bad[i] ^= mask
				got, err := wireform.Decode(bad, wireform.Limits{})
				switch {
				case err == nil:
					// Some bits do not change the output (unused
					// bitstream padding, say): then the value is exact.
					if err := wireEqual(m, got); err != nil {
						t.Fatalf("%s: byte %d ^ %#x decoded to a wrong value: %v", c, i, mask, err)
					}
					counts["harmless"]++
				case errors.Is(err, wireform.ErrCodec):
					counts["codec"]++
				case errors.Is(err, wireform.ErrChecksum):
					counts["checksum"]++
				case errors.Is(err, wireform.ErrSize):
					counts["size"]++
				default:
					t.Fatalf("%s: byte %d ^ %#x: got %v, want a codec, checksum or size error", c, i, mask, err)
				}
			}
		}
		t.Logf("%s: %d stored bytes, outcomes %v", c, info.StoredLen, counts)
	}
}

func zstdEncode(t testing.TB, b []byte) []byte {
	t.Helper()
	e, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	return e.EncodeAll(b, nil)
}

type wireZeros struct{}

func (wireZeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// wireZstdBomb is a real zstd frame of n zero bytes, built by streaming so
// that the test never holds n bytes. With fcs the frame declares its content
// size; without, the decoder learns it only by decoding.
func wireZstdBomb(t testing.TB, n int64, fcs bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	if fcs {
		e.ResetContentSize(&buf, n)
	} else {
		e.Reset(&buf)
	}
	if _, err := io.Copy(e, io.LimitReader(wireZeros{}, n)); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// s2Repeat appends s2 repeat-copy ops producing length more bytes (a port
// of s2's emitRepeat, with offset 1).
func s2Repeat(dst []byte, length int) []byte {
	const tagCopy1 = 1
	length -= 4
	if length <= 4 {
		return append(dst, uint8(length)<<2|tagCopy1, 0)
	}
	if length < 8 {
		return append(dst, uint8(length)<<2|tagCopy1, 1)
	}
	if length < 1<<8+4 {
		length -= 4
		return append(dst, 5<<2|tagCopy1, 0, uint8(length))
	}
	if length < 1<<16+1<<8 {
		length -= 1 << 8
		return append(dst, 6<<2|tagCopy1, 0, uint8(length), uint8(length>>8))
	}
	const maxRepeat = 1<<24 - 1
	length -= 1 << 16
	left := 0
	if length > maxRepeat {
		left = length - maxRepeat + 4
		length = maxRepeat - 4
	}
	dst = append(dst, 7<<2|tagCopy1, 0, uint8(length), uint8(length>>8), uint8(length>>16))
	if left > 0 {
		return s2Repeat(dst, left)
	}
	return dst
}

// wireS2Bomb is a real s2 block of n >= 16 zero bytes, a few hundred bytes
// long: one literal zero, one copy at offset 1, then repeats.
func wireS2Bomb(n int) []byte {
	b := binary.AppendUvarint(nil, uint64(n))
	b = append(b, 0<<2, 0) // literal of length 1: a zero
	b = append(b, 0<<2|1, 1)
	return s2Repeat(b, n-5)
}

// wireAlloc returns the bytes allocated by f.
func wireAlloc(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestDecodeBomb(t *testing.T) {
	const bomb = 1 << 30
	const declared = 1 << 20
	start := time.Now()
	zNoFCS := wireZstdBomb(t, bomb, false)
	zFCS := wireZstdBomb(t, bomb, true)
	sb := wireS2Bomb(bomb)
	t.Logf("1 GiB of zeros: zstd %d bytes, zstd with content size %d bytes, s2 %d bytes (built in %v)",
		len(zNoFCS), len(zFCS), len(sb), time.Since(start))

	// The s2 bomb builder is checked on a size the test can afford.
	small := wireS2Bomb(3<<20 + 17)
	if out, err := s2.Decode(nil, small); err != nil || len(out) != 3<<20+17 || bytes.ContainsFunc(out, func(r rune) bool { return r != 0 }) {
		t.Fatalf("s2 bomb builder: %d bytes, %v", len(out), err)
	}
	if n, err := s2.DecodedLen(sb); err != nil || n != bomb {
		t.Fatalf("s2 bomb declares %d, %v", n, err)
	}

	encodedForm := func(codec byte, raw uint64, stored []byte) []byte {
		return wireForm{magic: "SOPW", version: 1, kind: 1, dtype: 1, codec: codec, rank: 1,
			dims: []uint32{uint32(raw)}, rawLen: raw, stored: stored}.bytes()
	}
	for _, tc := range []struct {
		name     string
		in       []byte
		want     error
		maxAlloc uint64
	}{
		// Declared small: decompression stops within one zstd block (128
		// KiB) of the declared length, after at most one reallocation of
		// the output by the zstd decoder (growth 1.25x).
		{"zstd, declared 1 MiB", encodedForm(1, declared, zNoFCS), wireform.ErrSize, 5*declared/2 + 256<<10},
		{"zstd with content size, declared 1 MiB", encodedForm(1, declared, zFCS), wireform.ErrSize, 64 << 10},
		{"s2, declared 1 MiB", encodedForm(2, declared, sb), wireform.ErrSize, 64 << 10},
		// Declared above the limit: refused before any allocation.
		{"zstd, declared 1 GiB", encodedForm(1, bomb, zNoFCS), wireform.ErrTooLarge, 64 << 10},
		{"zstd with content size, declared 1 GiB", encodedForm(1, bomb, zFCS), wireform.ErrTooLarge, 64 << 10},
		{"s2, declared 1 GiB", encodedForm(2, bomb, sb), wireform.ErrTooLarge, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			_, _ = wireform.Decode(tc.in, wireform.Limits{}) // warm the shared decoders
			alloc := wireAlloc(func() { _, err = wireform.Decode(tc.in, wireform.Limits{}) })
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			t.Logf("%v; allocated %d bytes", err, alloc)
			if alloc > tc.maxAlloc {
				t.Fatalf("allocated %d bytes, want at most %d", alloc, tc.maxAlloc)
			}
		})
	}
}

// TestDecodeAllocs checks that decoding allocates the value and little
// more.
func TestDecodeAllocs(t *testing.T) {
	m := wirePhoto(224, 224, 6, 3)
	for _, c := range wireCodecs {
		b, err := wireform.Encode(m, c)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = wireform.Decode(b, wireform.Limits{})
		// The least of three: wireAlloc's GC can empty the decoder's pools
		// (a GC of its own between two of ours did, once, under make test's
		// load), and what refills them is no decode's own.
		alloc := uint64(math.MaxUint64)
		for range 3 {
			alloc = min(alloc, wireAlloc(func() { _, err = wireform.Decode(b, wireform.Limits{}) }))
			if err != nil {
				t.Fatal(err)
			}
		}
		if limit := uint64(len(m.Pix)) + 8<<10; alloc > limit {
			t.Errorf("%s: decoding a %d-byte image allocated %d bytes, want at most %d", c, len(m.Pix), alloc, limit)
		}
	}
}

// TestWireConcurrent runs encoders and decoders of every codec at once, for
// the race detector and the shared zstd instances.
func TestWireConcurrent(t *testing.T) {
	vals := wireValues()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for _, v := range vals {
				c := wireCodecs[g%len(wireCodecs)]
				b, err := wireform.Encode(v, c)
				if err == nil {
					var got ops.Value
					got, err = wireform.Decode(b, wireform.Limits{})
					if err == nil {
						err = wireEqual(v, got)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestWireCompressionRatios logs raw/stored for each codec on a photo-like
// image (as uint8 and as a normalised tensor) and on JPEG bytes, and checks
// the codecs help where they should.
func TestWireCompressionRatios(t *testing.T) {
	photo := wirePhoto(224, 224, 6, 11)
	clean := wirePhoto(224, 224, 0, 11)
	jpg := wireJPEG(wirePhoto(640, 480, 6, 12), 90)
	rnd := make([]byte, 300<<10)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range rnd {
		rnd[i] = byte(r.Uint32())
	}
	zf, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	zd, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	defer zf.Close()
	defer zd.Close()
	for _, tc := range []struct {
		name string
		v    ops.Value
	}{
		{"image 224x224 gradients+noise(+-6)", photo},
		{"image 224x224 gradients+noise(+-2)", wirePhoto(224, 224, 2, 11)},
		{"image 224x224 gradients, no noise", clean},
		{"tensor 3x224x224 of the noisy image", wireTensor(photo)},
		{"jpeg 640x480 q90", jpg},
		{"random bytes 300 KiB", ops.Encoded(rnd)},
	} {
		raw := wireRawBytes(tc.v)
		line := fmt.Sprintf("%-38s raw %7d:", tc.name, len(raw))
		ratio := func(n int) float64 { return float64(len(raw)) / float64(n) }
		line += fmt.Sprintf(" zstd-fastest %.3f", ratio(len(zf.EncodeAll(raw, nil))))
		line += fmt.Sprintf(" zstd-default %.3f", ratio(len(zd.EncodeAll(raw, nil))))
		line += fmt.Sprintf(" s2 %.3f", ratio(len(s2.Encode(nil, raw))))
		line += fmt.Sprintf(" s2-better %.3f", ratio(len(s2.EncodeBetter(nil, raw))))
		for _, c := range []wireform.Codec{wireform.CodecZstd, wireform.CodecS2} {
			b, err := wireform.Encode(tc.v, c)
			if err != nil {
				t.Fatal(err)
			}
			info, _ := wireform.ReadHeader(b)
			line += fmt.Sprintf(" | wire %s: %d bytes (%s)", c, len(b), info.Codec)
		}
		t.Log(line)
	}
	for _, c := range []wireform.Codec{wireform.CodecZstd, wireform.CodecS2} {
		b, _ := wireform.Encode(clean, c)
		if len(b) > len(clean.Pix)*98/100 {
			t.Errorf("%s: a noiseless gradient image of %d bytes takes %d", c, len(clean.Pix), len(b))
		}
	}
}

// wireBenchValues are the benchmark payloads: a 224x224 photo-like image,
// its 3x224x224 tensor and a 300 KB JPEG.
var wireBenchValues = sync.OnceValue(func() []struct {
	name string
	v    ops.Value
} {
	photo := wirePhoto(224, 224, 6, 21)
	jpg := wireJPEG(wirePhoto(1120, 840, 8, 22), 95) // 303097 bytes
	return []struct {
		name string
		v    ops.Value
	}{
		{"image224", photo},
		{"tensor224", wireTensor(photo)},
		{"encoded300K", jpg},
	}
})

func BenchmarkEncode(b *testing.B) {
	for _, bv := range wireBenchValues() {
		for _, c := range wireCodecs {
			b.Run(bv.name+"/"+c.String(), func(b *testing.B) {
				b.SetBytes(int64(bv.v.Size()))
				var buf []byte
				var err error
				for b.Loop() {
					buf, err = wireform.Append(buf[:0], bv.v, c)
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(buf))/float64(bv.v.Size()), "wire/raw")
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, bv := range wireBenchValues() {
		for _, c := range wireCodecs {
			b.Run(bv.name+"/"+c.String(), func(b *testing.B) {
				buf, err := wireform.Encode(bv.v, c)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(bv.v.Size()))
				for b.Loop() {
					if _, err := wireform.Decode(buf, wireform.Limits{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(buf))/float64(bv.v.Size()), "wire/raw")
			})
		}
	}
}

// BenchmarkWireZstdLevels compares the zstd levels the wire encoder could
// use; it justifies SpeedFastest.
func BenchmarkWireZstdLevels(b *testing.B) {
	for _, bv := range wireBenchValues()[:2] {
		raw := wireRawBytes(bv.v)
		for _, lvl := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression} {
			b.Run(bv.name+"/"+lvl.String(), func(b *testing.B) {
				e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(lvl), zstd.WithEncoderCRC(false))
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				b.SetBytes(int64(len(raw)))
				var out []byte
				for b.Loop() {
					out = e.EncodeAll(raw, out[:0])
				}
				b.ReportMetric(float64(len(raw))/float64(len(out)), "ratio")
			})
		}
	}
}

func TestNewEncoded(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 300 << 10} {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i*7 + n)
		}
		form, payload, err := wireform.NewEncoded(n)
		if err != nil {
			t.Fatal(err)
		}
		copy(payload, want)
		wireform.Seal(form)
		ref, err := wireform.Encode(ops.Encoded(want), wireform.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(form, ref) {
			t.Fatalf("n=%d: wireform.NewEncoded+wireform.Seal differs from wireform.Encode", n)
		}
		v, err := wireform.Decode(form, wireform.Limits{})
		if err != nil || !bytes.Equal(v.(ops.Encoded), want) {
			t.Fatalf("n=%d: decode gives %v", n, err)
		}
	}
	if _, _, err := wireform.NewEncoded(-1); !errors.Is(err, wireform.ErrHeader) {
		t.Errorf("negative length: got %v, want wireform.ErrHeader", err)
	}
}

// TestCheck checks that Check accepts exactly what Decode
// accepts, over valid forms of every codec and single-byte corruptions.
func TestCheck(t *testing.T) {
	img := ops.NewImage(40, 30)
	for i := range img.Pix {
		img.Pix[i] = byte(i / 7)
	}
	for _, c := range []wireform.Codec{wireform.CodecNone, wireform.CodecZstd, wireform.CodecS2} {
		for _, v := range []ops.Value{ops.Encoded("some jpeg bytes, honestly"), img} {
			form, err := wireform.Encode(v, c)
			if err != nil {
				t.Fatal(err)
			}
			for i := -1; i < len(form); i += 3 {
				b := bytes.Clone(form)
				if i >= 0 {
					b[i] ^= 0x41
				}
				_, errCheck := wireform.Check(b, wireform.Limits{})
				_, errDecode := wireform.Decode(b, wireform.Limits{})
				if (errCheck == nil) != (errDecode == nil) {
					t.Fatalf("%s %v byte %d: Check %v, Decode %v", c, v.Kind(), i, errCheck, errDecode)
				}
			}
		}
	}
	if _, err := wireform.Check(nil, wireform.Limits{}); !errors.Is(err, wireform.ErrHeader) {
		t.Errorf("empty: got %v, want ErrHeader", err)
	}
}

// wireCutPayload is a cut's raw wire payload: W, H, X, Y as uint32 LE, then
// the JPEG.
func wireCutPayload(w, h, x, y int, data []byte) []byte {
	b := make([]byte, 0, 16+len(data))
	for _, d := range []int{w, h, x, y} {
		b = binary.LittleEndian.AppendUint32(b, uint32(d))
	}
	return append(b, data...)
}

// wireCutForm is the form of a cut with the given raw payload, stored as is.
func wireCutForm(raw []byte) wireForm {
	return wireForm{magic: "SOPW", version: 1, kind: 4, dtype: 1, rank: 1, dims: []uint32{uint32(len(raw))},
		rawLen: uint64(len(raw)), crcRaw: raw, stored: raw}
}

// TestWireCut checks a cut's documented layout byte for byte, its round
// trip through every codec, and that Decode refuses a cut whose
// geometry is short or puts the origin outside the image, as Encode
// refuses to write one.
func TestWireCut(t *testing.T) {
	jpg := wireJPEG(wirePhoto(48, 32, 4, 7), 80)
	c := &ops.CutJPEG{W: 1000, H: 700, X: 64, Y: 48, Data: jpg}
	got, err := wireform.Encode(c, wireform.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	raw := wireCutPayload(1000, 700, 64, 48, jpg)
	if want := wireCutForm(raw).bytes(); !bytes.Equal(got, want) {
		t.Fatalf("cut form\n got % x\nwant % x", got[:60], want[:60])
	}
	if c.Size() != len(raw) {
		t.Fatalf("Size %d, want %d", c.Size(), len(raw))
	}
	for _, codec := range wireCodecs {
		b, err := wireform.Encode(c, codec)
		if err != nil {
			t.Fatal(err)
		}
		v, err := wireform.Decode(b, wireform.Limits{})
		if err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
		if err := wireEqual(c, v); err != nil {
			t.Fatalf("%s: %v", codec, err)
		}
	}

	for _, tc := range []struct {
		name string
		raw  []byte
		want error
	}{
		{"empty", nil, wireform.ErrSize},
		{"15 bytes", raw[:15], wireform.ErrSize},
		{"width 0", wireCutPayload(0, 700, 0, 0, jpg), wireform.ErrHeader},
		{"height 0", wireCutPayload(1000, 0, 0, 0, jpg), wireform.ErrHeader},
		{"x at the width", wireCutPayload(1000, 700, 1000, 0, jpg), wireform.ErrHeader},
		{"y past the height", wireCutPayload(1000, 700, 0, 701, jpg), wireform.ErrHeader},
		{"x 2^32-1", wireCutPayload(1000, 700, 1<<32-1, 0, jpg), wireform.ErrHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := wireform.Decode(wireCutForm(tc.raw).bytes(), wireform.Limits{})
			if !errors.Is(err, tc.want) || v != nil {
				t.Fatalf("Decode: got %v, %v; want %v", v, err, tc.want)
			}
		})
	}
	for _, bad := range []*ops.CutJPEG{
		nil,
		{W: 0, H: 5, Data: jpg},
		{W: 5, H: 5, X: 5, Data: jpg},
		{W: 5, H: 5, Y: -1, Data: jpg},
		{W: 1 << 33, H: 5, Data: jpg},
	} {
		if _, err := wireform.Encode(bad, wireform.CodecNone); err == nil {
			t.Errorf("Encode(%+v) succeeded", bad)
		}
	}
}
