package synth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

func TestPhotoDeterministic(t *testing.T) {
	a := Photo(42, 203, 151)
	b := Photo(42, 203, 151)
	if !bytes.Equal(a.Pix, b.Pix) {
		t.Fatal("same seed gave different pixels")
	}
	c := Photo(43, 203, 151)
	if bytes.Equal(a.Pix, c.Pix) {
		t.Fatal("seeds 42 and 43 gave the same pixels")
	}
	if a.W != 203 || a.H != 151 || len(a.Pix) != 203*151*3 {
		t.Fatalf("got %dx%d with %d bytes, want 203x151 with %d", a.W, a.H, len(a.Pix), 203*151*3)
	}
}

// TestPhotoGolden pins the pixels: all pixel maths is integer, so these hold
// on every platform. A deliberate change to the generator changes datasets
// and must update them.
func TestPhotoGolden(t *testing.T) {
	for _, tc := range []struct {
		seed   uint64
		w, h   int
		detail float64
		want   string
	}{
		{1, 97, 61, 0, "bebb40581530ec2c"},
		{2, 640, 480, 0, "9efc0f49143a2e8a"},
		{3, 150, 100, 0.3, "8823dea854dddb28"},
	} {
		img := PhotoWith(tc.seed, tc.w, tc.h, PhotoOptions{Detail: tc.detail})
		sum := sha256.Sum256(img.Pix)
		if got := hex.EncodeToString(sum[:8]); got != tc.want {
			t.Errorf("Photo(%d, %d, %d, detail %v): got sha256 prefix %s, want %s", tc.seed, tc.w, tc.h, tc.detail, got, tc.want)
		}
	}
}

func TestPhotoDims(t *testing.T) {
	for _, d := range [][2]int{{1, 1}, {1, 700}, {700, 1}, {2, 3}, {4096, 2}, {20000, 2}, {3, 20000}} {
		img := Photo(9, d[0], d[1])
		if img.W != d[0] || img.H != d[1] || len(img.Pix) != d[0]*d[1]*3 {
			t.Errorf("%dx%d: got %dx%d with %d bytes", d[0], d[1], img.W, img.H, len(img.Pix))
		}
	}
	if img := Photo(9, 0, 5); len(img.Pix) != 0 {
		t.Errorf("0x5: got %d bytes, want 0", len(img.Pix))
	}
}

// TestPhotoNotFlat guards against a generator that clips to a few colours:
// a photo has many distinct values per channel and a spread of brightness.
func TestPhotoNotFlat(t *testing.T) {
	img := Photo(5, 320, 240)
	var seen [3][256]bool
	var sum, sq float64
	for i, v := range img.Pix {
		seen[i%3][v] = true
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	for c := range seen {
		n := 0
		for _, s := range seen[c] {
			if s {
				n++
			}
		}
		if n < 150 {
			t.Errorf("channel %d: got %d distinct values, want at least 150", c, n)
		}
	}
	n := float64(len(img.Pix))
	mean := sum / n
	sd := math.Sqrt(sq/n - mean*mean)
	if mean < 50 || mean > 205 || sd < 25 {
		t.Errorf("got mean %.1f, sd %.1f: want a mid-range mean and sd >= 25", mean, sd)
	}
}

func TestJPEGDeterministic(t *testing.T) {
	opt := Options{Quality: 85, Detail: 0.7}
	a, err := JPEG(7, 120, 90, opt)
	if err != nil {
		t.Fatal(err)
	}
	b, err := JPEG(7, 120, 90, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("same seed gave different bytes")
	}
	c, err := JPEG(8, 120, 90, opt)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, c) {
		t.Fatal("seeds 7 and 8 gave the same bytes")
	}
	if _, err := JPEG(7, 0, 90, opt); !errors.Is(err, ops.ErrSpec) {
		t.Errorf("0x90: got %v, want ErrSpec", err)
	}
}

// meanSize is the mean encoded size of n photos at w x h.
func meanSize(t *testing.T, w, h, n int, opt Options) float64 {
	t.Helper()
	total := 0
	for s := range n {
		b, err := JPEG(uint64(1000+s), w, h, opt)
		if err != nil {
			t.Fatal(err)
		}
		total += len(b)
	}
	return float64(total) / float64(n)
}

// TestDefaultSizes checks the calibration at the default options: about
// 110 KB at 500x375 and 300 KB at 1024x768, as photos are.
func TestDefaultSizes(t *testing.T) {
	for _, tc := range []struct {
		w, h, n int
		lo, hi  float64
	}{
		{500, 375, 16, 80e3, 140e3},
		{1024, 768, 10, 220e3, 380e3},
	} {
		got := meanSize(t, tc.w, tc.h, tc.n, Options{})
		t.Logf("%dx%d: mean %.1f KB", tc.w, tc.h, got/1e3)
		if got < tc.lo || got > tc.hi {
			t.Errorf("%dx%d: got mean %.0f bytes, want %.0f..%.0f", tc.w, tc.h, got, tc.lo, tc.hi)
		}
	}
}

func TestDetailKnob(t *testing.T) {
	var sizes []float64
	for _, d := range []float64{-1, 0.1, 0.5, 1, 3} {
		sizes = append(sizes, meanSize(t, 320, 240, 3, Options{Detail: d}))
	}
	t.Logf("320x240 at detail -1, 0.1, 0.5, 1, 3: %.0f bytes", sizes)
	for i := 1; i < len(sizes); i++ {
		if sizes[i] <= sizes[i-1]*1.05 {
			t.Errorf("sizes do not grow with detail: %.0f", sizes)
			break
		}
	}
}

func TestQuantile(t *testing.T) {
	table := []float64{0, 1, 3}
	for _, tc := range []struct {
		u    int
		want float64
	}{
		{0, 0}, {1 << 14, 0.5}, {1 << 15, 1}, {3 << 14, 2}, {1<<16 - 1, 3 - 2.0/1024},
	} {
		if got := quantile(table, tc.u); math.Abs(got-tc.want) > 1.0/1024 {
			t.Errorf("quantile(%d): got %v, want %v", tc.u, got, tc.want)
		}
	}
}

func TestSpecSample(t *testing.T) {
	for _, s := range []Spec{ImageNetLike, OpenImagesLike} {
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			w1, h1, o1 := s.Sample(3, i)
			w2, h2, o2 := s.Sample(3, i)
			if w1 != w2 || h1 != h2 || o1 != o2 {
				t.Fatalf("%s sample %d: not deterministic", s.Name, i)
			}
			if w1 < 1 || h1 < 1 || o1.Quality < 1 || o1.Quality > 100 || o1.Detail <= 0 {
				t.Fatalf("%s sample %d: got %dx%d %+v", s.Name, i, w1, h1, o1)
			}
		}
	}
	bad := []Spec{
		{Name: "no-dims", Detail: []float64{1, 1}, Qualities: []Quality{{90, 1}}},
		{Name: "zero-weight", Dims: []Dim{{W: 1, H: 1}}, Detail: []float64{1, 1}, Qualities: []Quality{{90, 1}}},
		{Name: "short-detail", Dims: []Dim{{W: 1, H: 1, Weight: 1}}, Detail: []float64{1}, Qualities: []Quality{{90, 1}}},
		{Name: "quality", Dims: []Dim{{W: 1, H: 1, Weight: 1}}, Detail: []float64{1, 1}, Qualities: []Quality{{101, 1}}},
		{Name: "scale", Dims: []Dim{{W: 1, H: 1, Weight: 1, Scale: [2]int{50, 40}}}, Detail: []float64{1, 1}, Qualities: []Quality{{90, 1}}},
	}
	for _, s := range bad {
		if err := s.Validate(); err == nil {
			t.Errorf("%s: got nil error", s.Name)
		}
	}
}

// TestSpecCalibration checks that a modest sample of each preset follows
// the real dataset's file-size distribution. The presets were fitted on
// larger samples; 80 samples are noisier, so the bounds are wide, but a
// generator or encoder change that shifts sizes by a fifth fails them.
func TestSpecCalibration(t *testing.T) {
	if testing.Short() {
		t.Skip("renders 160 images")
	}
	const n = 80
	for _, tc := range []struct {
		s                    Spec
		mean                 float64 // bytes
		above150k, above600k float64 // fractions of files above 150,528 and 602,112 bytes
		tolMean, tolFrac     float64
		checkAbove600k       bool
	}{
		{ImageNetLike, 110e3, 0.23, 0, 0.15, 0.08, false},
		{OpenImagesLike, 317e3, 0.75, 0.11, 0.15, 0.08, true},
	} {
		t.Run(tc.s.Name, func(t *testing.T) {
			t.Parallel()
			var total, a, b int
			for i := range n {
				data, err := tc.s.Generate(1, i)
				if err != nil {
					t.Fatal(err)
				}
				total += len(data)
				if len(data) > 150528 {
					a++
				}
				if len(data) > 602112 {
					b++
				}
			}
			mean := float64(total) / n
			fa, fb := float64(a)/n, float64(b)/n
			t.Logf("mean %.1f KB, %.3f above 150528, %.3f above 602112", mean/1e3, fa, fb)
			if math.Abs(mean/tc.mean-1) > tc.tolMean {
				t.Errorf("got mean %.0f bytes, want %.0f +- %.0f%%", mean, tc.mean, tc.tolMean*100)
			}
			if math.Abs(fa-tc.above150k) > tc.tolFrac {
				t.Errorf("got %.3f above 150528 bytes, want %.2f +- %.2f", fa, tc.above150k, tc.tolFrac)
			}
			if tc.checkAbove600k && math.Abs(fb-tc.above600k) > tc.tolFrac {
				t.Errorf("got %.3f above 602112 bytes, want %.2f +- %.2f", fb, tc.above600k, tc.tolFrac)
			}
		})
	}
}

func TestVaried(t *testing.T) {
	cases := Varied(11)
	again := Varied(11)
	total := 0
	names := map[string]bool{}
	for i, c := range cases {
		if names[c.Name] {
			t.Errorf("duplicate case %s", c.Name)
		}
		names[c.Name] = true
		total += len(c.Data)
		if !bytes.Equal(c.Data, again[i].Data) {
			t.Errorf("%s: not deterministic", c.Name)
		}
	}
	if total > 3<<20 {
		t.Errorf("got %d bytes in all, want under 3 MiB", total)
	}
	t.Logf("%d cases, %d bytes, backend %s", len(cases), total, ops.JPEGBackend)
	if ops.JPEGBackend == "libjpeg-turbo" && len(cases) != len(variedCases) {
		t.Errorf("got %d cases, want all %d with libjpeg-turbo", len(cases), len(variedCases))
	}

	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			idx := slices.IndexFunc(variedCases, func(v variedCase) bool { return v.name == c.Name })
			spec := variedCases[idx]
			hdr, err := ops.ReadJPEGHeader(c.Data)
			if err != nil {
				t.Fatal(err)
			}
			if hdr.W != spec.w || hdr.H != spec.h {
				t.Errorf("header: got %dx%d, want %dx%d", hdr.W, hdr.H, spec.w, spec.h)
			}
			wantComp := 3
			switch {
			case spec.opt.Gray:
				wantComp = 1
			case spec.opt.CMYK:
				wantComp = 4
			}
			if hdr.Components != wantComp || hdr.Progressive != spec.opt.Progressive {
				t.Errorf("header: got %d components, progressive %v; want %d, %v", hdr.Components, hdr.Progressive, wantComp, spec.opt.Progressive)
			}
			img, err := ops.DecodeJPEG(c.Data, ops.DecodeLimits{})
			if spec.opt.CMYK {
				switch {
				case errors.Is(err, ops.ErrUnsupported):
					t.Logf("CMYK (%s): refused with ErrUnsupported: %v", hdr.ColorSpace, err)
					return
				case err == nil:
					t.Logf("CMYK (%s): converted to RGB", hdr.ColorSpace)
				default:
					t.Fatalf("CMYK: got %v, want success or ErrUnsupported", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if img.W != spec.w || img.H != spec.h || len(img.Pix) != spec.w*spec.h*3 {
				t.Fatalf("decoded %dx%d with %d bytes, want %dx%d", img.W, img.H, len(img.Pix), spec.w, spec.h)
			}
			if spec.opt.Gray {
				for i := 0; i < len(img.Pix); i += 3 {
					if img.Pix[i] != img.Pix[i+1] || img.Pix[i] != img.Pix[i+2] {
						t.Fatalf("grey image decoded with colour at pixel %d", i/3)
					}
				}
			}
			// The decode should resemble the source photo (lossy, so
			// loosely): mean absolute error well under the texture's
			// contrast. Tiny images are all edge and are skipped.
			if spec.w*spec.h >= 64*48 && !spec.opt.Gray {
				src := PhotoWith(mix(11^mix(uint64(idx))), spec.w, spec.h, PhotoOptions{Detail: spec.opt.Detail})
				var sad int
				for i, v := range img.Pix {
					d := int(v) - int(src.Pix[i])
					sad += max(d, -d)
				}
				if mae := float64(sad) / float64(len(img.Pix)); mae > 20 {
					t.Errorf("decoded image differs from its source by %.1f levels on average", mae)
				}
			}
		})
	}
}

func TestWriteImageFolder(t *testing.T) {
	spec := Spec{
		Name:      "tiny",
		Dims:      []Dim{{W: 64, H: 48, Weight: 2}, {W: 40, H: 60, Scale: [2]int{50, 150}, Weight: 1}},
		Detail:    []float64{0.2, 2},
		Qualities: []Quality{{80, 1}, {95, 1}},
	}
	const n, classes = 23, 4
	dir1, dir3 := t.TempDir(), t.TempDir()
	paths1, err := writeImageFolder(dir1, spec, 5, n, classes, 1)
	if err != nil {
		t.Fatal(err)
	}
	paths3, err := writeImageFolder(dir3, spec, 5, n, classes, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths1) != n || len(paths3) != n {
		t.Fatalf("got %d and %d paths, want %d", len(paths1), len(paths3), n)
	}
	for i := range n {
		rel, err := filepath.Rel(dir1, paths1[i])
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(fmt.Sprintf("class_%03d", i%classes), fmt.Sprintf("n%08d.jpg", i))
		if rel != want {
			t.Errorf("path %d: got %s, want %s", i, rel, want)
		}
		rel3, _ := filepath.Rel(dir3, paths3[i])
		if rel3 != rel {
			t.Errorf("path %d: got %s with 3 workers, %s with 1", i, rel3, rel)
		}
		b1, err := os.ReadFile(paths1[i])
		if err != nil {
			t.Fatal(err)
		}
		b3, err := os.ReadFile(paths3[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b3) {
			t.Errorf("sample %d: 1 and 3 workers wrote different bytes", i)
		}
		want1, err := spec.Generate(5, i)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, want1) {
			t.Errorf("sample %d: file differs from Spec.Generate", i)
		}
		w, h, _ := spec.Sample(5, i)
		img, err := ops.DecodeJPEG(b1, ops.DecodeLimits{})
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if img.W != w || img.H != h {
			t.Errorf("sample %d: decoded %dx%d, Sample says %dx%d", i, img.W, img.H, w, h)
		}
	}
	// Exactly the class folders and files: nothing temporary left behind.
	var found []string
	err = filepath.WalkDir(dir1, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir1 {
			rel, _ := filepath.Rel(dir1, p)
			found = append(found, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dirs := 0
	for _, f := range found {
		if !strings.Contains(f, string(filepath.Separator)) {
			dirs++
		}
	}
	if dirs != classes || len(found) != classes+n {
		t.Errorf("got %d entries (%d class folders), want %d files in %d folders: %v", len(found), dirs, n, classes, found)
	}

	if _, err := WriteImageFolder(t.TempDir(), Spec{Name: "empty"}, 1, 3, 2); err == nil {
		t.Error("invalid spec: got nil error")
	}
	if _, err := WriteImageFolder(t.TempDir(), spec, 1, -1, 2); err == nil {
		t.Error("negative n: got nil error")
	}
}

func BenchmarkPhoto(b *testing.B) {
	for _, d := range [][2]int{{500, 375}, {1024, 768}} {
		b.Run(fmt.Sprintf("%dx%d", d[0], d[1]), func(b *testing.B) {
			b.SetBytes(int64(d[0] * d[1] * 3))
			var seed uint64
			for b.Loop() {
				Photo(seed, d[0], d[1])
				seed++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
		})
	}
}

func BenchmarkJPEG(b *testing.B) {
	b.SetBytes(1024 * 768 * 3)
	var seed uint64
	for b.Loop() {
		if _, err := JPEG(seed, 1024, 768, Options{}); err != nil {
			b.Fatal(err)
		}
		seed++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
}
