package ops_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

// torchRRCScript draws argv[2] boxes per image size (argv[4:], "WxH") with
// torchvision's RandomResizedCrop.get_params and its default scale and ratio,
// seeding torch with argv[3]+k for the k-th size, and writes x, y, w, h of
// each as native int32s to argv[1].
const torchRRCScript = `import sys
from array import array
try:
    import torch
    import torchvision.transforms as T
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(3)
torch.set_num_threads(1)
out, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rrc = T.RandomResizedCrop(224)
a = array("i")
for k, size in enumerate(sys.argv[4:]):
    w, h = map(int, size.split("x"))
    torch.manual_seed(seed + k)
    img = torch.empty((1, h, w), dtype=torch.uint8)
    for _ in range(n):
        i, j, ch, cw = rrc.get_params(img, rrc.scale, rrc.ratio)
        a.extend((j, i, cw, ch))
with open(out, "wb") as f:
    a.tofile(f)
`

// ksAlpha is the significance level of every test here: small, so that a
// correct sampler passes even across seed changes.
const ksAlpha = 0.001

// ks2 is the two-sample Kolmogorov–Smirnov statistic: the largest distance
// between the empirical CDFs of a and b. Ties are stepped over together, so
// discrete samples are handled.
func ks2(a, b []float64) float64 {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	n, m := float64(len(a)), float64(len(b))
	var d float64
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		x := min(a[i], b[j])
		for i < len(a) && a[i] == x {
			i++
		}
		for j < len(b) && b[j] == x {
			j++
		}
		d = max(d, math.Abs(float64(i)/n-float64(j)/m))
	}
	return d
}

// ksCritical is the asymptotic critical value of ks2 at level alpha for
// samples of n and m: c(alpha) * sqrt((n+m)/(n*m)), c = sqrt(-ln(alpha/2)/2).
// It is conservative for discrete distributions.
func ksCritical(n, m int, alpha float64) float64 {
	c := math.Sqrt(-math.Log(alpha/2) / 2)
	return c * math.Sqrt(float64(n+m)/float64(n*m))
}

// rrcFallback is torchvision's central fallback box for a w x h image,
// written out independently of SampleRRCBox.
func rrcFallback(w, h int, p ops.RRCParams) ops.Rect {
	in := float64(w) / float64(h)
	cw, ch := w, h
	if in < p.Ratio[0] {
		ch = int(math.RoundToEven(float64(w) / p.Ratio[0]))
	} else if in > p.Ratio[1] {
		cw = int(math.RoundToEven(float64(h) * p.Ratio[1]))
	}
	return ops.Rect{X: (w - cw) / 2, Y: (h - ch) / 2, W: cw, H: ch}
}

// rrcStats are the marginals compared between two samplers.
type rrcStats struct {
	area, aspect, cx, cy []float64
	fallbacks            int
}

func collectRRCStats(w, h int, boxes []ops.Rect) rrcStats {
	fb := rrcFallback(w, h, ops.DefaultRRCParams)
	var s rrcStats
	for _, b := range boxes {
		s.area = append(s.area, float64(b.W*b.H)/float64(w*h))
		s.aspect = append(s.aspect, float64(b.W)/float64(b.H))
		s.cx = append(s.cx, (float64(b.X)+float64(b.W)/2)/float64(w))
		s.cy = append(s.cy, (float64(b.Y)+float64(b.H)/2)/float64(h))
		if b == fb {
			s.fallbacks++
		}
	}
	return s
}

// rrcCompare tests whether a and b come from the same distribution and
// returns one line per statistic and whether every test accepted.
func rrcCompare(a, b rrcStats) (lines []string, ok bool) {
	ok = true
	n, m := len(a.area), len(b.area)
	crit := ksCritical(n, m, ksAlpha)
	for _, c := range []struct {
		name string
		x, y []float64
	}{
		{"area", a.area, b.area},
		{"aspect", a.aspect, b.aspect},
		{"x-centre", a.cx, b.cx},
		{"y-centre", a.cy, b.cy},
	} {
		d := ks2(c.x, c.y)
		ok = ok && d <= crit
		lines = append(lines, fmt.Sprintf("KS %-8s D=%.4f crit=%.4f", c.name, d, crit))
	}
	// Two-proportion z-test on the fallback rate.
	pa, pb := float64(a.fallbacks)/float64(n), float64(b.fallbacks)/float64(m)
	pool := float64(a.fallbacks+b.fallbacks) / float64(n+m)
	tol := math.Sqrt2 * math.Erfinv(1-ksAlpha) * math.Sqrt(pool*(1-pool)*(1/float64(n)+1/float64(m)))
	ok = ok && math.Abs(pa-pb) <= tol
	lines = append(lines, fmt.Sprintf("fallback %.4f vs %.4f (|diff| %.4f, tol %.4f)", pa, pb, math.Abs(pa-pb), tol))
	return lines, ok
}

// wrongRRCBox is SampleRRCBox with the aspect ratio drawn uniformly instead
// of log-uniformly: the negative control.
func wrongRRCBox(w, h int, p ops.RRCParams, r *ops.Rand) ops.Rect {
	area := float64(w) * float64(h)
	for range 10 {
		target := area * r.Uniform(p.Scale[0], p.Scale[1])
		aspect := r.Uniform(p.Ratio[0], p.Ratio[1])
		cw := int(math.RoundToEven(math.Sqrt(target * aspect)))
		ch := int(math.RoundToEven(math.Sqrt(target / aspect)))
		if cw > 0 && cw <= w && ch > 0 && ch <= h {
			y := r.Intn(h - ch + 1)
			x := r.Intn(w - cw + 1)
			return ops.Rect{X: x, Y: y, W: cw, H: ch}
		}
	}
	return rrcFallback(w, h, p)
}

func drawBoxes(n int, sample func() ops.Rect) []ops.Rect {
	boxes := make([]ops.Rect, n)
	for i := range boxes {
		boxes[i] = sample()
	}
	return boxes
}

// TestRRCBoxMatchesTorchvision checks that SampleRRCBox draws from the same
// distribution as torchvision's RandomResizedCrop.get_params: two-sample KS
// tests on the crop's area fraction, aspect ratio and normalised centre, and
// a binomial test on the rate of central fallbacks. Seeds are fixed, so the
// outcome is deterministic; the low alpha keeps it robust to seed changes.
func TestRRCBoxMatchesTorchvision(t *testing.T) {
	const draws = 20000
	const torchSeed = 20240607
	sizes := []struct{ w, h int }{{500, 375}, {1024, 683}, {100, 1000}, {64, 48}}

	dir := t.TempDir()
	out := filepath.Join(dir, "boxes.bin")
	args := []string{out, strconv.Itoa(draws), strconv.Itoa(torchSeed)}
	for _, s := range sizes {
		args = append(args, fmt.Sprintf("%dx%d", s.w, s.h))
	}
	runPeer(t, dir, torchRRCScript, "python3-torchvision", args...)
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(sizes) * draws * 4 * 4; len(raw) != want {
		t.Fatalf("torchvision wrote %d bytes, want %d", len(raw), want)
	}
	word := func(i int) int { return int(int32(binary.LittleEndian.Uint32(raw[4*i:]))) }

	for si, s := range sizes {
		torch := make([]ops.Rect, draws)
		for i := range torch {
			k := (si*draws + i) * 4
			torch[i] = ops.Rect{X: word(k), Y: word(k + 1), W: word(k + 2), H: word(k + 3)}
		}
		r := ops.NewRand(ops.SeedFor(7, 0, uint64(si), 0))
		ours := drawBoxes(draws, func() ops.Rect { return ops.SampleRRCBox(s.w, s.h, ops.DefaultRRCParams, r) })
		torchStats := collectRRCStats(s.w, s.h, torch)
		lines, ok := rrcCompare(collectRRCStats(s.w, s.h, ours), torchStats)
		for _, l := range lines {
			t.Logf("%dx%d ours vs torchvision: %s", s.w, s.h, l)
		}
		if !ok {
			t.Errorf("%dx%d: SampleRRCBox's distribution differs from torchvision's (alpha %g)", s.w, s.h, ksAlpha)
		}

		// Negative controls: the same comparison must reject samplers that
		// are wrong in ways a port could plausibly be.
		if s.w != 500 {
			continue
		}
		wrongs := []struct {
			name   string
			sample func(r *ops.Rand) ops.Rect
		}{
			{"scale (0.2, 1)", func(r *ops.Rand) ops.Rect {
				return ops.SampleRRCBox(s.w, s.h, ops.RRCParams{Scale: [2]float64{0.2, 1}, Ratio: ops.DefaultRRCParams.Ratio}, r)
			}},
			{"linear ratio", func(r *ops.Rand) ops.Rect { return wrongRRCBox(s.w, s.h, ops.DefaultRRCParams, r) }},
		}
		for _, wr := range wrongs {
			r := ops.NewRand(ops.SeedFor(7, 1, uint64(si), 0))
			boxes := drawBoxes(draws, func() ops.Rect { return wr.sample(r) })
			lines, ok := rrcCompare(collectRRCStats(s.w, s.h, boxes), torchStats)
			for _, l := range lines {
				t.Logf("%dx%d %s vs torchvision: %s", s.w, s.h, wr.name, l)
			}
			if ok {
				t.Errorf("%dx%d: negative control %q was not rejected", s.w, s.h, wr.name)
			}
		}
	}
}
