package ops_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops"
)

// peerPython is the interpreter that carries Debian's python3-pil and
// python3-torchvision. NB: not the python3 first on PATH, which may be a
// pyenv build without them.
const peerPython = "/usr/bin/python3"

// peerMissing is the exit status the embedded scripts use when an import
// fails, so the tests can skip instead of failing.
const peerMissing = 3

// runPeer writes script to dir and runs it under peerPython with args. It
// skips t, naming pkg, when the interpreter or the module is missing.
func runPeer(t *testing.T, dir, script, pkg string, args ...string) {
	t.Helper()
	if _, err := os.Stat(peerPython); err != nil {
		testutil.Require(t, "%s not found; apt-get install %s", peerPython, pkg)
	}
	path := filepath.Join(dir, "peer.py")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(peerPython, append([]string{path}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == peerMissing {
		testutil.Require(t, "peer module missing (%s); apt-get install %s", bytes.TrimSpace(stderr.Bytes()), pkg)
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", peerPython, path, err, stderr.Bytes())
	}
}

// pillowScript resizes with Pillow every job of the JSON list in argv[1] and
// writes each result's raw RGB bytes to its own file.
const pillowScript = `import json, sys
try:
    from PIL import Image
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(3)
BILINEAR = getattr(Image, "Resampling", Image).BILINEAR
with open(sys.argv[1]) as f:
    jobs = json.load(f)
images = {}
for j in jobs:
    src = j["src"]
    if src not in images:
        with open(src, "rb") as f:
            images[src] = Image.frombytes("RGB", (j["w"], j["h"]), f.read())
    x, y, w, h = j["crop"]
    im = images[src].crop((x, y, x + w, y + h))
    box = j["box"]
    out = im.resize((j["outW"], j["outH"]), BILINEAR, box=tuple(box) if box else None)
    with open(j["out"], "wb") as f:
        f.write(out.tobytes())
`

type pillowJob struct {
	Src  string     `json:"src"`
	W    int        `json:"w"`
	H    int        `json:"h"`
	Crop [4]int     `json:"crop"`
	Box  []float64  `json:"box"` // nil: Pillow's default, the whole crop
	OutW int        `json:"outW"`
	OutH int        `json:"outH"`
	Out  string     `json:"out"`
	name string     // for messages
	box  [4]float32 // what Resample is given
	got  *ops.Image
}

// syntheticPhoto draws a deterministic photo-like image: smooth colour
// gradients with low-frequency waves, a few hard-edged shapes and pixel
// noise, so both flat areas and edges get resampled.
func syntheticPhoto(w, h int, seed uint64) *ops.Image {
	m := ops.NewImage(w, h)
	r := ops.NewRand(seed)
	type disc struct {
		cx, cy, rad float64
		col         [3]float64
	}
	discs := make([]disc, 4)
	for i := range discs {
		discs[i] = disc{
			cx: r.Uniform(0, float64(w)), cy: r.Uniform(0, float64(h)),
			rad: r.Uniform(0.05, 0.3) * float64(min(w, h)),
			col: [3]float64{r.Uniform(0, 255), r.Uniform(0, 255), r.Uniform(0, 255)},
		}
	}
	rx0, ry0 := r.Intn(w), r.Intn(h)
	rx1, ry1 := rx0+1+r.Intn(max(1, w/3)), ry0+1+r.Intn(max(1, h/3))
	for y := range h {
		fy := float64(y) / float64(h)
		for x := range w {
			fx := float64(x) / float64(w)
			c := [3]float64{
				255 * fx,
				255 * fy,
				128 + 100*math.Sin(6*fx+4*fy)*math.Cos(3*fy),
			}
			for _, d := range discs {
				dx, dy := float64(x)-d.cx, float64(y)-d.cy
				if dx*dx+dy*dy < d.rad*d.rad {
					c = d.col
				}
			}
			if x >= rx0 && x < rx1 && y >= ry0 && y < ry1 {
				c = [3]float64{250, 250, 20}
			}
			p := m.Pix[(y*w+x)*3:]
			for ch := range 3 {
				v := c[ch] + r.Uniform(-12, 12)
				p[ch] = uint8(math.Max(0, math.Min(255, math.Round(v))))
			}
		}
	}
	return m
}

// psnr is the peak signal-to-noise ratio of b against a in dB; +Inf when
// they are identical.
func psnr(a, b []uint8) float64 {
	var se float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		se += d * d
	}
	if se == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255/(se/float64(len(a))))
}

// fidelityJobs lists the resizes compared for one w x h image: RRC boxes as
// training samples them, then edge cases.
func fidelityJobs(w, h int, seed uint64) []pillowJob {
	var jobs []pillowJob
	add := func(name string, c ops.Rect, box []float64, ow, oh int) {
		jobs = append(jobs, pillowJob{Crop: [4]int{c.X, c.Y, c.W, c.H}, Box: box, OutW: ow, OutH: oh, name: name})
	}
	whole := ops.Rect{W: w, H: h}
	r := ops.NewRand(seed)
	for i := range 14 {
		add(fmt.Sprintf("rrc%d", i), ops.SampleRRCBox(w, h, ops.DefaultRRCParams, r), nil, 224, 224)
	}
	add("whole", whole, nil, 224, 224)
	add("identity", whole, nil, w, h)
	add("non-square", whole, nil, 256, 341)
	add("only-horizontal", whole, nil, 97, h)
	add("only-vertical", whole, nil, w, 61)
	add("1px-wide", ops.Rect{X: w / 2, W: 1, H: h}, nil, 224, 224)
	add("1px-high", ops.Rect{Y: h / 3, W: w, H: 1}, nil, 224, 224)
	up := ops.Rect{X: w / 4, Y: h / 5, W: min(w-w/4, 57), H: min(h-h/5, 43)}
	add("upscale", up, nil, 224, 224)
	// Fractional boxes inside the crop, as resize(size, BILINEAR, box=...).
	fc := ops.SampleRRCBox(w, h, ops.DefaultRRCParams, r)
	if fc.W >= 201 && fc.H >= 151 {
		add("box-literal", fc, []float64{3.25, 1.5, 200.75, 150.5}, 224, 224)
	}
	fw, fh := float64(whole.W), float64(whole.H)
	add("box-frac", whole, []float64{0.0137 * fw, 0.0421 * fh, 0.913 * fw, 0.7771 * fh}, 224, 224)
	add("box-frac-rect", whole, []float64{0.25 * fw, 0.125 * fh, 0.6 * fw, 0.99 * fh}, 256, 341)
	add("box-frac-up", up, []float64{0.3, 0.7, float64(up.W) - 0.45, float64(up.H) - 0.1}, 224, 224)
	for i := range jobs {
		j := &jobs[i]
		j.box = [4]float32{0, 0, float32(j.Crop[2]), float32(j.Crop[3])}
		if j.Box != nil {
			for k, v := range j.Box {
				j.box[k] = float32(v)
				// Pass Pillow exactly the float32 Resample sees.
				j.Box[k] = float64(j.box[k])
			}
		}
	}
	return jobs
}

// TestResampleMatchesPillow compares Resample with Pillow's
// img.crop(crop).resize(size, BILINEAR, box=box), the path torchvision's
// RandomResizedCrop takes on PIL images.
func TestResampleMatchesPillow(t *testing.T) {
	dir := t.TempDir()
	sizes := []struct{ w, h int }{
		{500, 375}, {1600, 1200}, {333, 251}, {17, 9}, {1, 1}, {40, 300},
	}
	var jobs []pillowJob
	for si, s := range sizes {
		src := syntheticPhoto(s.w, s.h, uint64(si)+1)
		path := filepath.Join(dir, fmt.Sprintf("img%d.rgb", si))
		if err := os.WriteFile(path, src.Pix, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, j := range fidelityJobs(s.w, s.h, uint64(100+si)) {
			j.Src, j.W, j.H = path, s.w, s.h
			j.Out = filepath.Join(dir, fmt.Sprintf("out%d.rgb", len(jobs)))
			j.name = fmt.Sprintf("%dx%d/%s crop=%v box=%v out=%dx%d", s.w, s.h, j.name, j.Crop, j.box, j.OutW, j.OutH)
			c := ops.Rect{X: j.Crop[0], Y: j.Crop[1], W: j.Crop[2], H: j.Crop[3]}
			j.got = ops.Resample(src, c, j.box, j.OutW, j.OutH)
			jobs = append(jobs, j)
		}
	}
	spec, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}
	specPath := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(specPath, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	runPeer(t, dir, pillowScript, "python3-pil", specPath)

	const minPSNR = 40
	worst, identical := math.Inf(1), 0
	for _, j := range jobs {
		want, err := os.ReadFile(j.Out)
		if err != nil {
			t.Fatal(err)
		}
		if j.got.W != j.OutW || j.got.H != j.OutH || len(j.got.Pix) != len(want) {
			t.Errorf("%s: got %dx%d (%d bytes), want %dx%d (%d bytes)",
				j.name, j.got.W, j.got.H, len(j.got.Pix), j.OutW, j.OutH, len(want))
			continue
		}
		p := psnr(want, j.got.Pix)
		worst = math.Min(worst, p)
		if bytes.Equal(want, j.got.Pix) {
			identical++
		}
		if p < minPSNR {
			t.Errorf("%s: PSNR %.2f dB, want >= %d dB", j.name, p, minPSNR)
		} else if !math.IsInf(p, 1) {
			// NB: Resample documents byte identity with Pillow, and the
			// bench-driven rewrites of its loops rely on this test to
			// catch any drift, so a near miss fails too.
			t.Errorf("%s: PSNR %.2f dB, not byte-identical to Pillow", j.name, p)
		}
	}
	t.Logf("%d cases: min PSNR %.2f dB, %d byte-identical", len(jobs), worst, identical)
}
