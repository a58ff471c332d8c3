package jpeg

import (
	"bytes"
	"errors"
	"testing"
)

// jpegSentinels are the errors every JPEG decode failure must wrap.
var jpegSentinels = []error{ErrEmpty, ErrNotJPEG, ErrTruncated, ErrCorrupt, ErrTooLarge, ErrUnsupported}

func jpegCheckSentinel(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range jpegSentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("%s: error %q wraps none of the JPEG sentinels", what, err)
}

// FuzzDecodeJPEG feeds arbitrary bytes to ReadHeader, Decode and
// DecodeRegion under small limits: none may panic, every error must wrap
// a sentinel, a successful decode must have the declared size, and a region
// of a successfully decoded image must decode too, equal to the same
// rectangle of the whole image decoded at the same scale.
func FuzzDecodeJPEG(f *testing.F) {
	seeds := []struct {
		w, h int
		opt  EncodeOptions
	}{
		{16, 16, EncodeOptions{Quality: 50}},
		{33, 17, EncodeOptions{Quality: 90}},
		{24, 24, EncodeOptions{Gray: true}},
		{40, 24, EncodeOptions{Progressive: true}},
		{16, 24, EncodeOptions{Subsampling: 444, Quality: 30}},
		{24, 16, EncodeOptions{Subsampling: 422}},
		{40, 24, EncodeOptions{LumaSampling: [2]int{4, 2}}},
		{24, 40, EncodeOptions{LumaSampling: [2]int{1, 2}, Progressive: true}},
		{16, 16, EncodeOptions{CMYK: true}},
		{16, 16, EncodeOptions{CMYK: true, YCCK: true}},
		{1, 1, EncodeOptions{}},
	}
	for i, s := range seeds {
		data, err := Encode(jpegTestImage(s.w, s.h, uint64(i)), s.opt)
		if err != nil {
			continue // an option this backend cannot write
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
		f.Add(data[:len(data)-2])
	}
	f.Add([]byte{})
	f.Add([]byte{0xFF, 0xD8})
	f.Add(jpegHugeHeader(65535, 65535))
	f.Add(jpegHugeHeader(64, 64))

	// Scan and memory limits keep the fuzzer from spending its time on scan
	// bombs; the checks below hold under them too. 64 scans is a server's
	// default (ops.DefaultMaxScans).
	lim := DecodeLimits{MaxPixels: 1 << 20, MaxScans: 64, MaxMemory: 64 << 20}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, herr := ReadHeader(data)
		jpegCheckSentinel(t, "ReadHeader", herr)
		img, err := Decode(data, lim)
		jpegCheckSentinel(t, "Decode", err)
		if err == nil {
			if herr != nil {
				t.Fatalf("Decode succeeded where ReadHeader failed: %v", herr)
			}
			if img == nil || img.W != h.W || img.H != h.H || len(img.Pix) != h.W*h.H*channels {
				t.Fatalf("Decode gave %v for a %dx%d header", img, h.W, h.H)
			}
		}
		if herr != nil {
			return
		}
		checkSummary(t, h)
		scale := 1 + len(data)%8
		sw, sh := ScaledSize(h.W, h.H, scale)
		r := Rect{X: sw / 4, Y: sh / 3, W: max(sw/2, 1), H: max(sh/3, 1)}
		part, got, rerr := DecodeRegion(data, scale, r, lim)
		jpegCheckSentinel(t, "DecodeRegion", rerr)
		if rerr != nil {
			if err == nil {
				t.Fatalf("DecodeRegion(%d/8, %v) failed where Decode succeeded: %v", scale, r, rerr)
			}
			return
		}
		if got.Y != r.Y || got.H != r.H || got.X > r.X || got.X+got.W != r.X+r.W || part.W != got.W || part.H != got.H || len(part.Pix) != got.W*got.H*channels {
			t.Fatalf("DecodeRegion(%d/8, %v) covers %v with a %dx%d image", scale, r, got, part.W, part.H)
		}
		if err != nil {
			return
		}
		whole := img
		if scale != 8 {
			var wr Rect
			whole, wr, err = DecodeRegion(data, scale, Rect{W: sw, H: sh}, lim)
			if err != nil || wr != (Rect{W: sw, H: sh}) {
				t.Fatalf("DecodeRegion(%d/8, whole) gave %v, %v where Decode succeeded", scale, wr, err)
			}
		}
		if diff := jpegFirstDiff(whole, part, got); diff != "" {
			t.Fatalf("DecodeRegion(%d/8, %v) differs from the whole image at that scale: %s", scale, r, diff)
		}
		if scale == 8 && r == (Rect{W: sw, H: sh}) && !bytes.Equal(img.Pix, part.Pix) {
			t.Fatalf("whole-image region differs from Decode")
		}
	})
}
