package jpeg

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/internal/testutil"
)

// jpegTestImage is a deterministic photo-like image: smooth colour gradients
// and soft blobs plus mild noise.
func jpegTestImage(w, h int, seed uint64) *Image {
	img := newImage(w, h)
	s := seed*0x9E3779B97F4A7C15 + 1
	for y := range h {
		for x := range w {
			s ^= s << 13
			s ^= s >> 7
			s ^= s << 17
			// Gradients span the image, or 200 pixels in a smaller one,
			// so that tiny images stay smooth.
			fx, fy := float64(x)/float64(max(w, 200)), float64(y)/float64(max(h, 200))
			blob := 60 * math.Sin(fx*7+float64(seed)) * math.Cos(fy*5)
			noise := float64(int(s%17) - 8)
			i := (y*w + x) * channels
			img.Pix[i] = jpegClamp(40 + 160*fx + blob + noise)
			img.Pix[i+1] = jpegClamp(200 - 120*fy + blob/2 + noise)
			img.Pix[i+2] = jpegClamp(90 + 80*fx*fy - blob + noise)
		}
	}
	return img
}

func jpegClamp(v float64) uint8 {
	return uint8(math.Round(math.Min(255, math.Max(0, v))))
}

// jpegPSNR is the peak signal-to-noise ratio of b against a, in dB.
func jpegPSNR(a, b *Image) float64 {
	var se float64
	for i := range a.Pix {
		d := float64(a.Pix[i]) - float64(b.Pix[i])
		se += d * d
	}
	if se == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255*float64(len(a.Pix))/se)
}

// jpegLuma is the grey image a Gray encode starts from, replicated to RGB.
func jpegLuma(img *Image) *Image {
	out := newImage(img.W, img.H)
	for i := 0; i < len(img.Pix); i += 3 {
		y := uint8((19595*int(img.Pix[i]) + 38470*int(img.Pix[i+1]) + 7471*int(img.Pix[i+2]) + 1<<15) >> 16)
		out.Pix[i], out.Pix[i+1], out.Pix[i+2] = y, y, y
	}
	return out
}

// jpegCase is one encode configuration of the test images.
type jpegCase struct {
	name string
	w, h int
	opt  EncodeOptions
	// want is what ReadHeader must report.
	comps int
	space string
	// cgoOnly marks options the pure-Go encoder refuses.
	cgoOnly bool
}

var jpegCases = []jpegCase{
	{name: "420", w: 160, h: 120, comps: 3, space: "ycbcr"},
	{name: "422", w: 160, h: 120, opt: EncodeOptions{Subsampling: 422}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "444", w: 160, h: 120, opt: EncodeOptions{Subsampling: 444}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "gray", w: 160, h: 120, opt: EncodeOptions{Gray: true}, comps: 1, space: "gray"},
	{name: "440", w: 160, h: 120, opt: EncodeOptions{LumaSampling: [2]int{1, 2}}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "411", w: 203, h: 117, opt: EncodeOptions{LumaSampling: [2]int{4, 1}}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "410", w: 203, h: 117, opt: EncodeOptions{LumaSampling: [2]int{4, 2}}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "410_progressive", w: 203, h: 117, opt: EncodeOptions{LumaSampling: [2]int{4, 2}, Progressive: true}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "h3v1", w: 203, h: 117, opt: EncodeOptions{LumaSampling: [2]int{3, 1}}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "h1v3", w: 117, h: 203, opt: EncodeOptions{LumaSampling: [2]int{1, 3}}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "progressive", w: 160, h: 120, opt: EncodeOptions{Progressive: true}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "progressive_gray", w: 97, h: 61, opt: EncodeOptions{Progressive: true, Gray: true}, comps: 1, space: "gray", cgoOnly: true},
	{name: "cmyk", w: 160, h: 120, opt: EncodeOptions{CMYK: true}, comps: 4, space: "cmyk", cgoOnly: true},
	{name: "ycck", w: 160, h: 120, opt: EncodeOptions{CMYK: true, YCCK: true}, comps: 4, space: "ycck", cgoOnly: true},
	{name: "odd_333x251", w: 333, h: 251, comps: 3, space: "ycbcr"},
	{name: "odd_333x251_444_q75", w: 333, h: 251, opt: EncodeOptions{Subsampling: 444, Quality: 75}, comps: 3, space: "ycbcr", cgoOnly: true},
	{name: "1x1", w: 1, h: 1, comps: 3, space: "ycbcr"},
	{name: "17x9", w: 17, h: 9, comps: 3, space: "ycbcr"},
	{name: "9x17_gray", w: 9, h: 17, opt: EncodeOptions{Gray: true}, comps: 1, space: "gray"},
}

// encode makes the case's JPEG, skipping the test where the backend cannot.
func (c jpegCase) encode(t testing.TB) ([]byte, *Image) {
	t.Helper()
	if c.cgoOnly && Backend != "libjpeg-turbo" {
		t.Skipf("%s cannot encode %+v (cgo is off)", Backend, c.opt)
	}
	img := jpegTestImage(c.w, c.h, uint64(c.w*7+c.h))
	data, err := Encode(img, c.opt)
	if err != nil {
		t.Fatalf("Encode(%s): %v", c.name, err)
	}
	return data, img
}

func TestReadJPEGHeader(t *testing.T) {
	for _, c := range jpegCases {
		t.Run(c.name, func(t *testing.T) {
			data, _ := c.encode(t)
			h, err := ReadHeader(data)
			if err != nil {
				t.Fatalf("ReadHeader: %v", err)
			}
			got := fmt.Sprintf("%dx%d %d %s %v", h.W, h.H, h.Components, h.ColorSpace, h.Progressive)
			want := fmt.Sprintf("%dx%d %d %s %v", c.w, c.h, c.comps, c.space, c.opt.Progressive)
			if got != want {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// TestDecodeJPEGRoundTrip decodes every case and checks the pixels against
// what was encoded.
func TestDecodeJPEGRoundTrip(t *testing.T) {
	for _, c := range jpegCases {
		t.Run(c.name, func(t *testing.T) {
			data, src := c.encode(t)
			img, err := Decode(data, DecodeLimits{})
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if img.W != c.w || img.H != c.h || len(img.Pix) != c.w*c.h*channels {
				t.Fatalf("got %dx%d with %d bytes, want %dx%d", img.W, img.H, len(img.Pix), c.w, c.h)
			}
			want := src
			if c.opt.Gray {
				want = jpegLuma(src)
				for i := 0; i < len(img.Pix); i += 3 {
					if img.Pix[i] != img.Pix[i+1] || img.Pix[i] != img.Pix[i+2] {
						t.Fatalf("grey pixel %d is %v, want equal channels", i/3, img.Pix[i:i+3])
					}
				}
			}
			if p := jpegPSNR(want, img); p < 30 {
				t.Errorf("PSNR %.1f dB, want > 30", p)
			} else {
				t.Logf("PSNR %.1f dB (%d bytes)", p, len(data))
			}
		})
	}
}

// jpegTestData is the 333x251 colour JPEG most error tests mutate.
func jpegTestData(t testing.TB) []byte {
	t.Helper()
	data, err := Encode(jpegTestImage(333, 251, 3), EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// jpegScanStart is the offset of the first byte of entropy-coded data.
func jpegScanStart(t testing.TB, data []byte) int {
	t.Helper()
	for p := 2; p+4 <= len(data); {
		m := data[p+1]
		n := int(data[p+2])<<8 | int(data[p+3])
		if m == 0xDA {
			return p + 2 + n
		}
		p += 2 + n
	}
	t.Fatal("no SOS marker")
	return 0
}

// jpegMarkerAt is the offset of the first marker m.
func jpegMarkerAt(t testing.TB, data []byte, m byte) int {
	t.Helper()
	for p := 2; p+4 <= len(data); {
		if data[p+1] == m {
			return p
		}
		p += 2 + (int(data[p+2])<<8 | int(data[p+3]))
	}
	t.Fatalf("no marker 0x%02x", m)
	return 0
}

// jpegHugeHeader is SOI, an SOF0 declaring w x h with three components, and
// an SOS: enough for the header parse, nothing else.
func jpegHugeHeader(w, h int) []byte {
	return []byte{
		0xFF, 0xD8,
		0xFF, 0xC0, 0, 17, 8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 3,
		1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1,
		0xFF, 0xDA, 0, 12, 3, 1, 0, 2, 0x11, 3, 0x11, 0, 63, 0,
		0, 0, 0, 0,
	}
}

func TestDecodeJPEGErrors(t *testing.T) {
	data := jpegTestData(t)
	scan := jpegScanStart(t, data)
	n := len(data)
	trunc := func(at int) []byte { return bytes.Clone(data[:at]) }
	rnd := make([]byte, 4096)
	s := uint64(12345)
	for i := range rnd {
		s = s*6364136223846793005 + 1442695040888963407
		rnd[i] = byte(s >> 56)
	}
	rnd[0] = 0x42

	type tc struct {
		name string
		in   []byte
		lim  DecodeLimits
		want error
	}
	cases := []tc{
		{"empty", nil, DecodeLimits{}, ErrEmpty},
		{"zero_bytes", []byte{}, DecodeLimits{}, ErrEmpty},
		{"random", rnd, DecodeLimits{}, ErrNotJPEG},
		{"text", []byte("not a JPEG, just some text\n"), DecodeLimits{}, ErrNotJPEG},
		{"png_magic", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), DecodeLimits{}, ErrNotJPEG},
		{"one_ff", []byte{0xFF}, DecodeLimits{}, ErrTruncated},
		{"soi_only", trunc(2), DecodeLimits{}, ErrTruncated},
		{"in_app0_length", trunc(5), DecodeLimits{}, ErrTruncated},
		{"in_app0", trunc(10), DecodeLimits{}, ErrTruncated},
		{"in_dqt", trunc(jpegMarkerAt(t, data, 0xDB) + 30), DecodeLimits{}, ErrTruncated},
		{"in_sof", trunc(jpegMarkerAt(t, data, 0xC0) + 8), DecodeLimits{}, ErrTruncated},
		{"in_dht", trunc(jpegMarkerAt(t, data, 0xC4) + 20), DecodeLimits{}, ErrTruncated},
		{"in_sos", trunc(jpegMarkerAt(t, data, 0xDA) + 6), DecodeLimits{}, ErrTruncated},
		{"scan_start", trunc(scan), DecodeLimits{}, ErrTruncated},
		{"scan_10pct", trunc(scan + (n-scan)/10), DecodeLimits{}, ErrTruncated},
		{"scan_50pct", trunc(scan + (n-scan)/2), DecodeLimits{}, ErrTruncated},
		{"scan_90pct", trunc(scan + (n-scan)*9/10), DecodeLimits{}, ErrTruncated},
		{"scan_end", trunc(n - 3), DecodeLimits{}, ErrTruncated},
		{"no_eoi", trunc(n - 2), DecodeLimits{}, ErrTruncated},
		{"half_eoi", trunc(n - 1), DecodeLimits{}, ErrTruncated},
		{"huge_65535", jpegHugeHeader(65535, 65535), DecodeLimits{}, ErrTooLarge},
		{"over_limit", data, DecodeLimits{MaxPixels: 333*251 - 1}, ErrTooLarge},
		{"at_limit", data, DecodeLimits{MaxPixels: 333 * 251}, nil},
		{"trailing_garbage", append(bytes.Clone(data), "trailing bytes after EOI"...), DecodeLimits{}, nil},
		{"second_soi", append([]byte{0xFF, 0xD8}, data...), DecodeLimits{}, ErrCorrupt},
		{"garbage_before_marker", append([]byte{0xFF, 0xD8, 0x00}, data[2:]...), DecodeLimits{}, ErrCorrupt},
		{"eoi_before_sof", []byte{0xFF, 0xD8, 0xFF, 0xD9}, DecodeLimits{}, ErrCorrupt},
		{"sos_before_sof", []byte{0xFF, 0xD8, 0xFF, 0xDA, 0, 2}, DecodeLimits{}, ErrCorrupt},
		{"lossless", []byte{0xFF, 0xD8, 0xFF, 0xC3, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0}, DecodeLimits{}, ErrUnsupported},
		{"12bit", []byte{0xFF, 0xD8, 0xFF, 0xC1, 0, 11, 12, 0, 8, 0, 8, 1, 1, 0x11, 0}, DecodeLimits{}, ErrUnsupported},
		{"two_components", []byte{0xFF, 0xD8, 0xFF, 0xC0, 0, 14, 8, 0, 8, 0, 8, 2, 1, 0x11, 0, 2, 0x11, 0}, DecodeLimits{}, ErrUnsupported},
		{"bad_sampling", []byte{0xFF, 0xD8, 0xFF, 0xC0, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x51, 0}, DecodeLimits{}, ErrCorrupt},
	}
	// A marker where entropy data should continue.
	withMarker := bytes.Clone(data)
	mid := scan + (n-scan)/2
	withMarker[mid], withMarker[mid+1] = 0xFF, 0xD3
	cases = append(cases, tc{"marker_in_scan", withMarker, DecodeLimits{}, ErrCorrupt})
	// A run of garbage in the middle of the scan.
	garbage := bytes.Clone(data)
	for i := range 64 {
		garbage[mid+i] = byte(i*37) &^ 0x80
	}
	cases = append(cases, tc{"garbage_in_scan", garbage, DecodeLimits{}, ErrCorrupt})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img, err := Decode(c.in, c.lim)
			if c.want == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if img != nil || !errors.Is(err, c.want) {
				if Backend != "libjpeg-turbo" && err == nil && c.want == ErrCorrupt {
					t.Skipf("%s decodes this corrupt input without error", Backend)
				}
				t.Fatalf("got %v, %v; want nil, %v", img, err, c.want)
			}
			t.Logf("%v", err)
			// DecodeRegion must fail alike on inputs whose failure
			// shows before the first row.
			if c.want != ErrTruncated && c.want != ErrCorrupt {
				_, _, rerr := DecodeRegion(c.in, 4, Rect{W: 1, H: 1}, c.lim)
				if !errors.Is(rerr, c.want) {
					t.Errorf("DecodeRegion: got %v, want %v", rerr, c.want)
				}
			}
		})
	}
}

// TestDecodeJPEGFlippedBytes flips single bytes in the entropy-coded data:
// every outcome must be a clean decode, ErrCorrupt or ErrTruncated (a flip can
// change only coefficient magnitude bits and go unnoticed, or make a marker
// and look like an early end). libjpeg notices only some of them; it must
// notice at least one.
func TestDecodeJPEGFlippedBytes(t *testing.T) {
	data := jpegTestData(t)
	scan := jpegScanStart(t, data)
	const trials = 200
	var detected int
	for i := range trials {
		b := bytes.Clone(data)
		at := scan + (i*7919)%(len(data)-2-scan)
		b[at] ^= byte(1 << (i % 8))
		img, err := Decode(b, DecodeLimits{})
		switch {
		case err == nil:
			if img == nil || img.W != 333 || img.H != 251 {
				t.Fatalf("flip at %d: got %v with nil error", at, img)
			}
		case errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTruncated):
			detected++
		default:
			t.Fatalf("flip at %d: got %v, want nil, ErrCorrupt or ErrTruncated", at, err)
		}
	}
	t.Logf("%s reported %d of %d flips", Backend, detected, trials)
	if Backend == "libjpeg-turbo" && detected == 0 {
		t.Errorf("libjpeg reported none of %d flips", trials)
	}
}

// TestDecodeJPEGTooLargeAllocatesNothing checks that a header declaring
// 65535x65535 is refused before anything in proportion to it is allocated.
func TestDecodeJPEGTooLargeAllocatesNothing(t *testing.T) {
	data := jpegHugeHeader(65535, 65535)
	h, err := ReadHeader(data)
	if err != nil || h.W != 65535 || h.H != 65535 {
		t.Fatalf("ReadHeader: got %+v, %v", h, err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const runs = 100
	allocs := testing.AllocsPerRun(runs, func() {
		if _, err := Decode(data, DecodeLimits{}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v, want ErrTooLarge", err)
		}
		if _, _, err := DecodeRegion(data, 1, Rect{W: 8, H: 8}, DecodeLimits{}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("region: got %v, want ErrTooLarge", err)
		}
	})
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / (runs + 1)
	t.Logf("%.0f allocations, %d bytes per run", allocs, perRun)
	if perRun > 4096 {
		t.Errorf("refusing a 65535x65535 header allocated %d bytes per run, want < 4096", perRun)
	}
}

func TestDecodeJPEGRegionArgs(t *testing.T) {
	data := jpegTestData(t) // 333x251; at 4/8: 167x126
	for _, c := range []struct {
		scale int
		r     Rect
		want  error
	}{
		{0, Rect{W: 1, H: 1}, ErrSpec},
		{9, Rect{W: 1, H: 1}, ErrSpec},
		{4, Rect{W: 0, H: 1}, ErrSpec},
		{4, Rect{X: -1, W: 2, H: 1}, ErrSpec},
		{4, Rect{X: 160, W: 8, H: 1}, ErrSpec},
		{4, Rect{Y: 120, W: 8, H: 7}, ErrSpec},
		{4, Rect{X: 166, Y: 125, W: 1, H: 1}, nil},
		{4, Rect{W: 167, H: 126}, nil},
	} {
		t.Run(fmt.Sprintf("%d_%v", c.scale, c.r), func(t *testing.T) {
			img, got, err := DecodeRegion(data, c.scale, c.r, DecodeLimits{})
			if !errors.Is(err, c.want) || (err == nil && (img == nil || got.W != img.W || got.H != img.H)) {
				t.Fatalf("got %v, %v, %v; want %v", img, got, err, c.want)
			}
		})
	}
}

func TestScaledSize(t *testing.T) {
	data := jpegTestData(t)
	for s := 1; s <= 8; s++ {
		w, h := ScaledSize(333, 251, s)
		wantW, wantH := (333*s+7)/8, (251*s+7)/8
		if w != wantW || h != wantH {
			t.Errorf("ScaledSize(333, 251, %d) = %dx%d, want %dx%d", s, w, h, wantW, wantH)
		}
		img, r, err := DecodeRegion(data, s, Rect{W: w, H: h}, DecodeLimits{})
		if err != nil {
			t.Fatalf("scale %d: %v", s, err)
		}
		if img.W != w || img.H != h || r != (Rect{W: w, H: h}) {
			t.Errorf("scale %d: decoded %dx%d covering %v, want %dx%d", s, img.W, img.H, r, w, h)
		}
	}
}

// TestDecodeJPEGRegionMatchesFull checks that a region decode equals the same
// rectangle of a full decode at the same scale.
func TestDecodeJPEGRegionMatchesFull(t *testing.T) {
	for _, c := range jpegCases {
		if c.w < 16 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			data, _ := c.encode(t)
			jpegCheckRegions(t, data, c.w, c.h)
		})
	}
}

// jpegCheckRegions decodes data (w x h) at every scale, whole and in fixed
// and pseudo-random regions, and checks every region against the whole.
func jpegCheckRegions(t *testing.T, data []byte, w, h int) {
	t.Helper()
	for s := 1; s <= 8; s++ {
		sw, sh := ScaledSize(w, h, s)
		full, fr, err := DecodeRegion(data, s, Rect{W: sw, H: sh}, DecodeLimits{})
		if err != nil {
			t.Fatalf("scale %d full: %v", s, err)
		}
		if fr != (Rect{W: sw, H: sh}) || full.W != sw || full.H != sh {
			t.Fatalf("scale %d full: got %v, want %dx%d", s, fr, sw, sh)
		}
		if s == 8 {
			whole, err := Decode(data, DecodeLimits{})
			if err != nil || !bytes.Equal(whole.Pix, full.Pix) {
				t.Fatalf("scale 8 full region differs from Decode (%v)", err)
			}
		}
		regions := []Rect{
			{X: sw / 4, Y: sh / 4, W: sw / 2, H: sh / 2},
			{X: 1, Y: 1, W: sw - 2, H: sh - 2},
			{X: sw - sw/3, Y: sh - sh/3, W: sw / 3, H: sh / 3},
			{X: 0, Y: sh / 2, W: max(sw/5, 1), H: sh - sh/2},
			{X: sw / 3, Y: 0, W: sw - sw/3, H: 1},
			{X: sw - 1, Y: sh - 1, W: 1, H: 1},
			{X: 7, Y: 3, W: 1, H: 5},
			// Column 32 is an iMCU boundary of 4:1:1 and 4:1:0 at full scale: the
			// window starts at the image's edge, 32 columns left.
			{X: 32, Y: 0, W: sw - 32, H: sh},
		}
		rs := uint64(s*1000 + w)
		next := func(n int) int {
			rs = rs*6364136223846793005 + 1442695040888963407
			return int((rs >> 33) % uint64(n))
		}
		for range 16 {
			rw, rh := 1+next(sw), 1+next(sh)
			regions = append(regions, Rect{X: next(sw - rw + 1), Y: next(sh - rh + 1), W: rw, H: rh})
		}
		for _, r := range regions {
			if r.W <= 0 || r.H <= 0 || r.X+r.W > sw || r.Y+r.H > sh {
				continue
			}
			img, got, err := DecodeRegion(data, s, r, DecodeLimits{})
			if err != nil {
				t.Fatalf("scale %d region %v: %v", s, r, err)
			}
			if got.Y != r.Y || got.H != r.H || got.X > r.X || got.X+got.W != r.X+r.W || got.X < 0 || r.X-got.X > 32 {
				t.Fatalf("scale %d region %v: covers %v, want the same rows and right edge", s, r, got)
			}
			if Backend != "libjpeg-turbo" && got != r {
				t.Fatalf("scale %d region %v: covers %v, want exactly the region", s, r, got)
			}
			if img.W != got.W || img.H != got.H || len(img.Pix) != got.W*got.H*channels {
				t.Fatalf("scale %d region %v: image %dx%d for %v", s, r, img.W, img.H, got)
			}
			if diff := jpegFirstDiff(full, img, got); diff != "" {
				t.Errorf("scale %d region %v (decoded %v): %s", s, r, got, diff)
			}
		}
	}
}

// jpegFirstDiff compares sub with the rectangle r of full.
func jpegFirstDiff(full, sub *Image, r Rect) string {
	n := 0
	first := ""
	for y := range r.H {
		for x := range r.W {
			a := full.Pix[((r.Y+y)*full.W+r.X+x)*channels:][:3]
			b := sub.Pix[(y*sub.W+x)*channels:][:3]
			if !bytes.Equal(a, b) {
				if n == 0 {
					first = fmt.Sprintf("at (%d,%d) got %v, want %v", r.X+x, r.Y+y, b, a)
				}
				n++
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d pixels differ, first %s", n, first)
}

func TestDecodeJPEGTruncatedBelowRegion(t *testing.T) {
	if Backend != "libjpeg-turbo" {
		t.Skipf("%s decodes the whole image for a region", Backend)
	}
	data := jpegTestData(t)
	scan := jpegScanStart(t, data)
	cut := data[:scan+(len(data)-scan)*3/4]
	if _, err := Decode(cut, DecodeLimits{}); !errors.Is(err, ErrTruncated) {
		t.Fatalf("full decode: got %v, want ErrTruncated", err)
	}
	img, _, err := DecodeRegion(cut, 8, Rect{X: 100, Y: 8, W: 100, H: 50}, DecodeLimits{})
	if err != nil || img == nil {
		t.Fatalf("region above the cut: got %v, want success", err)
	}
	if _, _, err := DecodeRegion(cut, 8, Rect{X: 100, Y: 200, W: 100, H: 51}, DecodeLimits{}); !errors.Is(err, ErrTruncated) {
		t.Fatalf("region below the cut: got %v, want ErrTruncated", err)
	}
}

func TestEncodeJPEGErrors(t *testing.T) {
	img := jpegTestImage(8, 8, 1)
	cases := []struct {
		name string
		img  *Image
		opt  EncodeOptions
		want error
	}{
		{"nil", nil, EncodeOptions{}, ErrSpec},
		{"empty", &Image{}, EncodeOptions{}, ErrSpec},
		{"short_pix", &Image{W: 8, H: 8, Pix: img.Pix[:10]}, EncodeOptions{}, ErrSpec},
		{"too_wide", &Image{W: 70000, H: 1, Pix: make([]uint8, 70000*3)}, EncodeOptions{}, ErrTooLarge},
		{"quality_0_default", img, EncodeOptions{Quality: 0}, nil},
		{"quality_101", img, EncodeOptions{Quality: 101}, ErrSpec},
		{"quality_neg", img, EncodeOptions{Quality: -1}, ErrSpec},
		{"subsampling_411", img, EncodeOptions{Subsampling: 411}, ErrSpec},
		{"gray_and_cmyk", img, EncodeOptions{Gray: true, CMYK: true}, ErrSpec},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Encode(c.img, c.opt)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	if Backend != "libjpeg-turbo" {
		for _, opt := range []EncodeOptions{{Progressive: true}, {CMYK: true}, {Subsampling: 444}, {Subsampling: 422}} {
			if _, err := Encode(img, opt); !errors.Is(err, ErrUnsupported) {
				t.Errorf("%+v: got %v, want ErrUnsupported", opt, err)
			}
		}
	}
}

func TestEncodeJPEGQualityOrders(t *testing.T) {
	img := jpegTestImage(200, 150, 9)
	var prev int
	for _, q := range []int{10, 50, 90, 100} {
		data, err := Encode(img, EncodeOptions{Quality: q})
		if err != nil {
			t.Fatal(err)
		}
		if len(data) <= prev {
			t.Errorf("quality %d: %d bytes, not more than %d at the lower quality", q, len(data), prev)
		}
		prev = len(data)
	}
}

// jpegPillowScript reads jobs from stdin, one a line:
//
//	dec IN.jpg OUT.raw D      decode IN (in draft mode at 1/D when D > 1),
//	                          convert("RGB"), write the raw bytes to OUT
//	enc IN.raw W H OUT.jpg K=V...   save the raw RGB image with Pillow's
//	                          encoder and the given save options
//
// and prints one line per job: the output's size, or "error" and the reason.
const jpegPillowScript = `
import sys
from PIL import Image
for line in sys.stdin:
    f = line.split()
    try:
        if f[0] == "dec":
            im = Image.open(f[1])
            d = int(f[3])
            if d > 1:
                im.draft(im.mode, (max(im.size[0] // d, 1), max(im.size[1] // d, 1)))
            im = im.convert("RGB")
            open(f[2], "wb").write(im.tobytes())
            print(im.size[0], im.size[1])
        else:
            w, h = int(f[2]), int(f[3])
            im = Image.frombytes("RGB", (w, h), open(f[1], "rb").read())
            kw = {}
            for kv in f[5:]:
                k, v = kv.split("=")
                kw[k] = int(v) if v.lstrip("-").isdigit() else (v == "True" if v in ("True", "False") else v)
            if kw.pop("gray", False):
                im = im.convert("L")
            if kw.pop("cmyk", False):
                im = im.convert("CMYK")
            im.save(f[4], "JPEG", **kw)
            print(w, h)
    except Exception as e:
        print("error", repr(e).replace("\n", " "))
`

// jpegPillow runs jobs through jpegPillowScript and returns its output
// lines, skipping the test when Pillow is missing.
func jpegPillow(t *testing.T, jobs []string) []string {
	t.Helper()
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import PIL.Image").CombinedOutput(); err != nil {
		testutil.Require(t, "no Pillow to compare with (%s -c 'import PIL.Image': %v: %s); install python3-pil", py, err, strings.TrimSpace(string(out)))
	}
	cmd := exec.Command(py, "-c", jpegPillowScript)
	cmd.Stdin = strings.NewReader(strings.Join(jobs, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pillow: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(jobs) {
		t.Fatalf("pillow answered %d lines for %d jobs: %s", len(lines), len(jobs), out)
	}
	return lines
}

// TestDecodeJPEGMatchesPillow compares Decode byte for byte with Pillow's
// decode and convert("RGB"), and DecodeRegion of the whole image at 4/8,
// 2/8 and 1/8 with Pillow's draft mode, which scales in libjpeg the same way.
// The JPEGs come from Encode and from Pillow's own encoder.
func TestDecodeJPEGMatchesPillow(t *testing.T) {
	if Backend != "libjpeg-turbo" {
		t.Skipf("%s is not byte-identical to Pillow's libjpeg-turbo by design", Backend)
	}
	dir := t.TempDir()
	type file struct {
		name string
		w, h int
		data []byte
	}
	var files []file
	for _, c := range jpegCases {
		data, _ := c.encode(t)
		files = append(files, file{c.name, c.w, c.h, data})
	}
	// JPEGs written by Pillow (libjpeg-turbo with Pillow's settings).
	pilCases := []struct {
		name string
		w, h int
		opts string
	}{
		{"pil_q75", 320, 240, "quality=75"},
		{"pil_progressive_optimized", 301, 199, "quality=85 progressive=True optimize=True"},
		{"pil_444", 64, 64, "quality=95 subsampling=0"},
		{"pil_422", 123, 77, "quality=80 subsampling=1"},
		{"pil_gray", 77, 123, "gray=True"},
		{"pil_cmyk", 100, 80, "cmyk=True"},
		{"pil_restart", 200, 150, "quality=90 restart_marker_blocks=2"},
	}
	var jobs []string
	for _, c := range pilCases {
		raw := filepath.Join(dir, c.name+".rgb")
		if err := os.WriteFile(raw, jpegTestImage(c.w, c.h, 5).Pix, 0o644); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, fmt.Sprintf("enc %s %d %d %s %s", raw, c.w, c.h, filepath.Join(dir, c.name+".jpg"), c.opts))
	}
	for i, line := range jpegPillow(t, jobs) {
		c := pilCases[i]
		if strings.HasPrefix(line, "error") {
			t.Logf("Pillow could not write %s (%s); skipped", c.name, line)
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, c.name+".jpg"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file{c.name, c.w, c.h, data})
	}

	jobs = jobs[:0]
	for _, f := range files {
		in := filepath.Join(dir, f.name+".jpg")
		if err := os.WriteFile(in, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, d := range []int{1, 2, 4, 8} {
			jobs = append(jobs, fmt.Sprintf("dec %s %s %d", in, filepath.Join(dir, fmt.Sprintf("%s_%d.raw", f.name, d)), d))
		}
	}
	answers := jpegPillow(t, jobs)
	for i, f := range files {
		t.Run(f.name, func(t *testing.T) {
			for j, d := range []int{1, 2, 4, 8} {
				var pw, ph int
				if _, err := fmt.Sscan(answers[4*i+j], &pw, &ph); err != nil {
					t.Fatalf("1/%d: pillow answered %q", d, answers[4*i+j])
				}
				want, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s_%d.raw", f.name, d)))
				if err != nil {
					t.Fatal(err)
				}
				s := 8 / d
				sw, sh := ScaledSize(f.w, f.h, s)
				if pw != sw || ph != sh {
					t.Fatalf("1/%d: Pillow's draft gave %dx%d, ScaledSize %dx%d", d, pw, ph, sw, sh)
				}
				img, _, err := DecodeRegion(f.data, s, Rect{W: sw, H: sh}, DecodeLimits{})
				if err != nil {
					t.Fatalf("1/%d: %v", d, err)
				}
				if !bytes.Equal(img.Pix, want) {
					n := 0
					for i := range want {
						if i < len(img.Pix) && img.Pix[i] != want[i] {
							n++
						}
					}
					t.Errorf("1/%d: %dx%d differs from Pillow's in %d of %d bytes", d, sw, sh, n, len(want))
				}
			}
			if strings.HasPrefix(f.name, "pil_") {
				jpegCheckRegions(t, f.data, f.w, f.h)
			}
		})
	}
}

// jpegBenchData is a photo-like JPEG at quality 90.
func jpegBenchData(b *testing.B, w, h int) []byte {
	b.Helper()
	data, err := Encode(jpegTestImage(w, h, 11), EncodeOptions{Quality: 90})
	if err != nil {
		b.Fatal(err)
	}
	return data
}

func BenchmarkDecodeJPEG(b *testing.B) {
	for _, sz := range [][2]int{{500, 375}, {1600, 1200}} {
		b.Run(fmt.Sprintf("%dx%d", sz[0], sz[1]), func(b *testing.B) {
			data := jpegBenchData(b, sz[0], sz[1])
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(data, DecodeLimits{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
		})
	}
}

// BenchmarkDecodeJPEGRegion decodes, at scale 4/8, the centred crop of half
// the scaled image's area.
func BenchmarkDecodeJPEGRegion(b *testing.B) {
	for _, sz := range [][2]int{{500, 375}, {1600, 1200}} {
		b.Run(fmt.Sprintf("%dx%d", sz[0], sz[1]), func(b *testing.B) {
			data := jpegBenchData(b, sz[0], sz[1])
			sw, sh := ScaledSize(sz[0], sz[1], 4)
			cw, ch := int(float64(sw)/math.Sqrt2), int(float64(sh)/math.Sqrt2)
			r := Rect{X: (sw - cw) / 2, Y: (sh - ch) / 2, W: cw, H: ch}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := DecodeRegion(data, 4, r, DecodeLimits{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
		})
	}
}

func BenchmarkEncodeJPEG(b *testing.B) {
	img := jpegTestImage(500, 375, 11)
	b.SetBytes(int64(len(img.Pix)))
	for b.Loop() {
		if _, err := Encode(img, EncodeOptions{Quality: 90}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
}
