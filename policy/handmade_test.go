package policy

import (
	"math"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/profiler"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b)) }

// twoSamples: ops [decode, random_resized_crop], link 100 B/s, one storage
// and one compute core. Options in seconds (link, storage, compute):
//
//	sample 0: k0 (10, 0, 2)   k1 (40, 1, 1)     k2 (1, 2, 0)
//	sample 1: k0 (2, 0, 1.5)  k1 (8, 0.5, 1)    k2 (1, 1.5, 0)
//
// Integral optimum: [2, 0] -> (3, 2, 1.5) = 3. LP: sample 0 at k2, sample 1
// 0.4 at k2: link 3-0.4 = storage 2+0.6 = 2.6.
func twoSamples() (*profiler.Profile, Resources) {
	p := &profiler.Profile{
		Ops: []string{"decode", "random_resized_crop"},
		Samples: []profiler.SampleProfile{
			{ID: 0, Raw: 1000, Bytes: []int64{1000, 4000, 100}, OpNS: []int64{1e9, 1e9}},
			{ID: 1, Raw: 200, Bytes: []int64{200, 800, 100}, OpNS: []int64{0.5e9, 1e9}},
		},
	}
	return p, Resources{LinkBytesPerSec: 100, StorageCores: 1, ComputeCores: 1}
}

// oneCompressed: ops [decode, crop], link 1000 B/s, one core each side.
// Options (link, storage, compute): k0 (1, 0, .4), k0c (1, .1, .5),
// k1 (3, .2, .2), k1c (1.5, .3, .3), k2 (.6, .4, 0), k2c (.3, .5, .1).
// Integral optimum k2c = 0.5; LP: 1/6 k0 + 5/6 k2c = 5/12 (dual weights
// (5/12, 7/12, 0) certify it).
func oneCompressed() (*profiler.Profile, Resources) {
	p := &profiler.Profile{
		Ops: []string{"decode", "crop"},
		Samples: []profiler.SampleProfile{{
			Raw: 1000, Bytes: []int64{1000, 3000, 600}, Compressed: []int64{1000, 1500, 300},
			CompressNS: []int64{1e8, 1e8, 1e8}, DecompressNS: []int64{1e8, 1e8, 1e8},
			OpNS: []int64{2e8, 2e8},
		}},
	}
	return p, Resources{LinkBytesPerSec: 1000, StorageCores: 1, ComputeCores: 1}
}

func TestHandmade(t *testing.T) {
	p2, r2 := twoSamples()
	p1, r1 := oneCompressed()
	for _, c := range []struct {
		name       string
		plan       Plan
		split      []int
		compressed bool
		seconds    float64
		bottleneck string
	}{
		{"two/nooff", one(NoOff, p2, r2), []int{0, 0}, false, 12, Link},
		{"two/alloff", one(AllOff, p2, r2), []int{2, 2}, false, 3.5, StorageCPU},
		{"two/resizeoff", one(ResizeOff, p2, r2), []int{2, 2}, false, 3.5, StorageCPU},
		{"two/fastflow", one(FastFlow, p2, r2), []int{2, 2}, false, 3.5, StorageCPU},
		// The greedy takes sample 0 (efficiency 900 B / 2 s); taking sample 1
		// would overshoot to storage 3.5 > 3, so the guard stops there.
		{"two/sophon", one(SOPHON, p2, r2), []int{2, 0}, false, 3, Link},
		{"two/optimal", one(Optimal, p2, r2), []int{2, 0}, false, 3, Link},
		{"one/nooff", one(NoOff, p1, r1), []int{0}, false, 1, Link},
		{"one/fastflow", one(FastFlow, p1, r1), []int{2}, false, 0.6, Link},
		{"one/sophon", one(SOPHON, p1, r1), []int{2}, false, 0.6, Link},
		{"one/optimal", one(Optimal, p1, r1), []int{2}, true, 0.5, StorageCPU},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.plan.Split; !equalInts(got, c.split) {
				t.Errorf("split: got %v, want %v", got, c.split)
			}
			if got := c.plan.Compress != nil && c.plan.Compress[0]; got != c.compressed {
				t.Errorf("compressed: got %v, want %v", got, c.compressed)
			}
			if got := c.plan.Pred.Seconds; !near(got, c.seconds) {
				t.Errorf("seconds: got %v, want %v", got, c.seconds)
			}
			if got := c.plan.Pred.Bottleneck; got != c.bottleneck {
				t.Errorf("bottleneck: got %v, want %v", got, c.bottleneck)
			}
		})
	}
	if got, want := bound1(p2, r2), 2.6; !near2(got, want) {
		t.Errorf("two/bound: got %v, want %v", got, want)
	}
	if got, want := bound1(p1, r1), 5.0/12; !near2(got, want) {
		t.Errorf("one/bound: got %v, want %v", got, want)
	}
	// The GPU bounds everything from below.
	r1.GPUSamplesPerSec = 1
	if got, want := bound1(p1, r1), 1.0; !near2(got, want) {
		t.Errorf("one/bound with GPU: got %v, want %v", got, want)
	}
}

// near2 allows the dual search's tolerance.
func near2(a, b float64) bool { return a <= b*(1+1e-12) && a >= b*(1-2e-6) }

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPredict(t *testing.T) {
	p, r := oneCompressed()
	r.StorageSpeed = 0.5
	r.GPUSamplesPerSec = 4
	got := predict1(p, r, []int{1}, []bool{true})
	want := Prediction{
		Seconds: 1.5, LinkSeconds: 1.5, StorageSeconds: 0.6, ComputeSeconds: 0.3, GPUSeconds: 0.25,
		Bytes: 1500, StorageCPUSeconds: 0.6, ComputeCPUSeconds: 0.3, Bottleneck: Link,
	}
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"Seconds", got.Seconds, want.Seconds}, {"LinkSeconds", got.LinkSeconds, want.LinkSeconds},
		{"StorageSeconds", got.StorageSeconds, want.StorageSeconds},
		{"ComputeSeconds", got.ComputeSeconds, want.ComputeSeconds},
		{"GPUSeconds", got.GPUSeconds, want.GPUSeconds}, {"Bytes", got.Bytes, want.Bytes},
		{"StorageCPUSeconds", got.StorageCPUSeconds, want.StorageCPUSeconds},
		{"ComputeCPUSeconds", got.ComputeCPUSeconds, want.ComputeCPUSeconds},
	} {
		if !near(f.got, f.want) {
			t.Errorf("%s: got %v, want %v", f.name, f.got, f.want)
		}
	}
	if got.Bottleneck != want.Bottleneck {
		t.Errorf("Bottleneck: got %v, want %v", got.Bottleneck, want.Bottleneck)
	}
	// Unlimited resources cost nothing; out-of-range splits clamp.
	got = predict1(p, Resources{}, []int{9}, nil)
	if got.Seconds != 0 || got.Bytes != 600 {
		t.Errorf("unlimited: got %+v, want 0 s and 600 B", got)
	}
}

func TestHistogram(t *testing.T) {
	pl := Plan{Split: []int{SplitCut, 0, 2, 2, SplitCut, 3, -2, 9}}
	if got, want := pl.Histogram(3), []int{2, 1, 0, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestDegenerate(t *testing.T) {
	r := Resources{LinkBytesPerSec: 1, StorageCores: 1, ComputeCores: 1, GPUSamplesPerSec: 1}
	for _, p := range []*profiler.Profile{
		{},
		{Ops: []string{"decode"}},
		{Samples: []profiler.SampleProfile{{Raw: 5, Bytes: []int64{5}}}},
	} {
		for _, pl := range all1(p, r) {
			if len(pl.Split) != len(p.Samples) {
				t.Errorf("%s: got %d splits, want %d", pl.Policy, len(pl.Split), len(p.Samples))
			}
		}
		want := float64(len(p.Samples)) * 5
		if got := one(Optimal, p, r).Pred.Seconds; got != want {
			t.Errorf("optimal: got %v, want %v", got, want)
		}
		if got := bound1(p, r); !near2(got, want) {
			t.Errorf("bound: got %v, want %v", got, want)
		}
	}
}

func TestWithMeasured(t *testing.T) {
	r := Resources{LinkBytesPerSec: 1e6, StorageCores: 4, ComputeCores: 8, GPUSamplesPerSec: 100, StorageSpeed: 1}
	if got := r.WithMeasured(nil); got != r {
		t.Errorf("nil: got %+v, want %+v", got, r)
	}
	m := &profiler.MeasuredResources{LinkBytesPerSec: 2e6, StorageSpeed: 0.8, ComputeCores: math.Inf(1), Epochs: 3}
	want := Resources{LinkBytesPerSec: 2e6, StorageCores: 4, ComputeCores: 8, GPUSamplesPerSec: 100, StorageSpeed: 0.8}
	if got := r.WithMeasured(m); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestCropSplit: the profile's recorded crop split wins over op names; a
// profile without one falls back to them.
func TestCropSplit(t *testing.T) {
	p := &profiler.Profile{Ops: []string{"decode", "center_crop", "to_tensor"}}
	if got := CropSplit(p); got != 2 {
		t.Errorf("from names: %d, want 2", got)
	}
	p.CropSplit = 1
	if got := CropSplit(p); got != 1 {
		t.Errorf("recorded 1: got %d", got)
	}
	for _, c := range []struct {
		ops  []string
		want int
	}{
		{[]string{"decode", "random_resized_crop", "random_horizontal_flip", "to_tensor"}, 2},
		{[]string{"decode_random_resized_crop", "to_tensor"}, 1},
		{[]string{"decode", "resize", "center_crop", "to_tensor"}, 3},
		{[]string{"decode", "center_cropper"}, -1},
		{[]string{"decode", "to_tensor"}, -1},
		{nil, -1},
	} {
		if got := CropSplit(&profiler.Profile{Ops: c.ops}); got != c.want {
			t.Errorf("CropSplit of ops %v: got %v, want %v", c.ops, got, c.want)
		}
	}
}

// TestComputePerSample: Resources.ComputeNSPerSample costs the compute
// side that much per sample at every split, so a compute-bound plan moves
// by it, the plan that a compute-bound profile calls for changes with it,
// and the bound stays under the optimum.
func TestComputePerSample(t *testing.T) {
	p, r := twoSamples()
	base := predict1(p, r, []int{0, 0}, nil)
	r.ComputeNSPerSample = 1e9
	with := predict1(p, r, []int{0, 0}, nil)
	if !near(with.ComputeCPUSeconds-base.ComputeCPUSeconds, 2) || !near(with.ComputeSeconds-base.ComputeSeconds, 2) {
		t.Errorf("1 s a sample over 2 samples: compute CPU %v -> %v, compute %v -> %v; want 2 s more of each",
			base.ComputeCPUSeconds, with.ComputeCPUSeconds, base.ComputeSeconds, with.ComputeSeconds)
	}
	if with.LinkSeconds != base.LinkSeconds || with.StorageSeconds != base.StorageSeconds {
		t.Errorf("the compute term moved the link (%v -> %v) or storage (%v -> %v)", base.LinkSeconds, with.LinkSeconds, base.StorageSeconds, with.StorageSeconds)
	}
	// Without it the optimum is [2, 0] at (3, 2, 1.5) = 3. With it [2, 0]
	// is compute-bound at (3, 2, 3.5) and [2, 2] storage-bound at (2, 3.5,
	// 2): 3.5. The LP moves half of sample 1 to k2: storage 2 + 0.75 =
	// compute 3.5 - 0.75 = 2.75, link 2.5.
	opt, err := byName1(NameOptimal, p, r)
	if err != nil {
		t.Fatal(err)
	}
	if !near(opt.Pred.Seconds, 3.5) {
		t.Errorf("optimal with 1 s a sample beyond the ops: %v s (split %v), want 3.5", opt.Pred.Seconds, opt.Split)
	}
	b, err := Bound(OneNode(p, r))
	if err != nil {
		t.Fatal(err)
	}
	if !near(b.Seconds, 2.75) {
		t.Errorf("bound %v, want 2.75", b.Seconds)
	}
}
