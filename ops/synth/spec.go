package synth

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sophon-dl/sophon/ops"
)

// Dim is a candidate image size. A sample that draws it is W x H scaled by
// a percentage drawn uniformly from Scale (both bounds inclusive; zero
// means exactly 100), keeping the aspect ratio.
type Dim struct {
	W, H   int
	Scale  [2]int
	Weight int
}

// Quality is a candidate JPEG quality factor.
type Quality struct {
	Quality int
	Weight  int
}

// Spec is a dataset's distribution of image sizes, detail and JPEG quality:
// what [Spec.Sample] draws from for each sample.
type Spec struct {
	Name string
	// Dims are drawn with probability proportional to their weights.
	Dims []Dim
	// Detail is a quantile table of [Options.Detail]: entry k is the
	// detail at quantile k/(len-1), linear in between. It needs at least
	// two entries, which should be positive (zero detail means 1).
	Detail []float64
	// Qualities are drawn with probability proportional to their weights.
	Qualities []Quality
}

// ImageNetLike follows ImageNet's training set (ILSVRC-2012): most images
// 500 px on the long side, a spread of smaller and larger ones, a mean file
// near 110 KB and about 23% of files larger than 150,528 bytes (a 224x224x3
// uint8 crop). Its weights were fitted to these targets with libjpeg-turbo;
// TestSpecCalibration checks that a sample still follows them. Treat it as
// read-only.
var ImageNetLike = Spec{
	Name: "imagenet-like",
	Dims: []Dim{
		{W: 500, H: 375, Weight: 38},
		{W: 500, H: 333, Weight: 14},
		{W: 375, H: 500, Weight: 10},
		{W: 333, H: 500, Weight: 5},
		{W: 500, H: 500, Weight: 4},
		{W: 500, H: 400, Weight: 4},
		{W: 500, H: 375, Scale: [2]int{40, 95}, Weight: 13},
		{W: 500, H: 375, Scale: [2]int{110, 200}, Weight: 6},
		{W: 375, H: 500, Scale: [2]int{110, 180}, Weight: 3},
	},
	Detail:    []float64{0.04, 0.15, 0.35, 0.6, 0.95, 1.25, 1.6, 2.2},
	Qualities: []Quality{{75, 12}, {85, 18}, {90, 20}, {95, 32}, {97, 18}},
}

// OpenImagesLike follows Open Images as commonly distributed (resized to
// 1024 px on the long side): a mean file near 317 KB, about 75% of files
// larger than 150,528 bytes and 11% larger than 602,112 (a 224x224x3
// float32 tensor). Its weights were fitted to these targets with
// libjpeg-turbo; TestSpecCalibration checks that a sample still follows
// them. Treat it as read-only.
var OpenImagesLike = Spec{
	Name: "openimages-like",
	Dims: []Dim{
		{W: 1024, H: 768, Weight: 50},
		{W: 1024, H: 683, Weight: 20},
		{W: 768, H: 1024, Weight: 14},
		{W: 1024, H: 576, Weight: 8},
		{W: 1024, H: 1024, Weight: 4},
		{W: 683, H: 1024, Weight: 4},
	},
	Detail:    []float64{0.02, 0.07, 0.18, 0.35, 0.65, 1.2, 2.5, 8},
	Qualities: []Quality{{75, 6}, {85, 15}, {90, 32}, {95, 25}, {98, 22}},
}

// sampleSeed is sample i's seed within a dataset seeded with seed.
func sampleSeed(seed uint64, i int) uint64 {
	return mix(mix(seed^0x73796e7468) ^ uint64(i))
}

// Sample draws sample i's dimensions and options. It is a pure function of
// (s, seed, i). It panics if s is not valid (see [Spec.Validate]).
func (s Spec) Sample(seed uint64, i int) (w, h int, opt Options) {
	r := ops.NewRand(sampleSeed(seed, i))
	d := s.Dims[pickWeighted(r, len(s.Dims), func(k int) int { return s.Dims[k].Weight })]
	w, h = d.W, d.H
	if d.Scale != [2]int{} {
		p := d.Scale[0] + r.Intn(d.Scale[1]-d.Scale[0]+1)
		w, h = max(1, (w*p+50)/100), max(1, (h*p+50)/100)
	}
	opt.Quality = s.Qualities[pickWeighted(r, len(s.Qualities), func(k int) int { return s.Qualities[k].Weight })].Quality
	opt.Detail = quantile(s.Detail, r.Intn(1<<16))
	return w, h, opt
}

// Generate renders and encodes sample i.
func (s Spec) Generate(seed uint64, i int) ([]byte, error) {
	w, h, opt := s.Sample(seed, i)
	return JPEG(mix(sampleSeed(seed, i)^0x70686f746f), w, h, opt)
}

// pickWeighted draws an index in [0, n) with probability proportional to
// weight(k).
func pickWeighted(r *ops.Rand, n int, weight func(int) int) int {
	total := 0
	for k := range n {
		total += weight(k)
	}
	u := r.Intn(total)
	for k := range n {
		if u -= weight(k); u < 0 {
			return k
		}
	}
	return n - 1
}

// quantile interpolates table at u/2^16 in integer Q10 arithmetic, so the
// result (a multiple of 1/1024, exact in a float64) is the same on every
// platform.
func quantile(table []float64, u int) float64 {
	n := int64(len(table) - 1)
	pos := int64(u) * n
	i, f := pos>>16, pos&0xffff
	a := int64(table[i] * 1024)
	if i == n {
		return float64(a) / 1024
	}
	b := int64(table[i+1] * 1024)
	return float64(a+(b-a)*f>>16) / 1024
}

// WriteImageFolder writes n samples of s in torchvision's ImageFolder
// layout: dir/class_000/n00000000.jpg, sample i in class i % classes
// (classes < 1 means 1). It returns the files' paths in sample order. The
// samples are rendered in parallel on runtime.NumCPU() workers; the files
// do not depend on how many.
func WriteImageFolder(dir string, s Spec, seed uint64, n int, classes int) ([]string, error) {
	return writeImageFolder(dir, s, seed, n, classes, runtime.NumCPU())
}

func writeImageFolder(dir string, s Spec, seed uint64, n, classes, workers int) ([]string, error) {
	if n < 0 {
		return nil, fmt.Errorf("synth: negative sample count %d", n)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	classes = max(classes, 1)
	width := max(3, len(fmt.Sprint(classes-1)))
	for c := range min(classes, n) {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("class_%0*d", width, c)), 0o755); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
	}
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("class_%0*d", width, i%classes), fmt.Sprintf("n%08d.jpg", i))
	}

	errs := make([]error, n)
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if errs[i] = writeSample(paths[i], s, seed, i); errs[i] != nil {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// writeSample writes sample i to path through a temporary file, so a file
// that exists is complete.
func writeSample(path string, s Spec, seed uint64, i int) error {
	data, err := s.Generate(seed, i)
	if err != nil {
		return fmt.Errorf("synth: sample %d: %w", i, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// Validate reports a spec that [Spec.Sample] cannot draw from.
func (s Spec) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("synth: spec %q: "+format, append([]any{s.Name}, a...)...)
	}
	total := 0
	for _, d := range s.Dims {
		if d.W < 1 || d.H < 1 || d.Weight < 0 || d.Scale[0] < 0 || d.Scale[1] < d.Scale[0] {
			return bad("bad dim %+v", d)
		}
		total += d.Weight
	}
	if total == 0 {
		return bad("no dims with weight")
	}
	total = 0
	for _, q := range s.Qualities {
		if q.Quality < 1 || q.Quality > 100 || q.Weight < 0 {
			return bad("bad quality %+v", q)
		}
		total += q.Weight
	}
	if total == 0 {
		return bad("no qualities with weight")
	}
	if len(s.Detail) < 2 {
		return bad("detail table needs two entries, has %d", len(s.Detail))
	}
	return nil
}
