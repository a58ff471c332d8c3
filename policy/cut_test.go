package policy

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/policy/synthetic"
	"github.com/sophon-dl/sophon/profiler"
)

// cutPair: ops [decode, random_resized_crop, flip], link 100 B/s, one
// storage and one compute core. Options in seconds (link, storage,
// compute):
//
//	sample 0: k0 (10, 0, .7)  k1 (50, .4, .3)  k2 (3, .6, .1)  k3 (3, .7, 0)  cut (2, .05, .4)
//	sample 1: k0 (5, 0, .5)   k1 (30, .2, .3)  k2 (3, .4, .1)  k3 (3, .5, 0)  (no cut)
//
// Optimum: [cut, 2] -> (5, .45, .5) = 5; without the cut 6.
func cutPair() (*profiler.Profile, Resources) {
	p := &profiler.Profile{
		Ops: []string{"decode", "random_resized_crop", "random_horizontal_flip"},
		Samples: []profiler.SampleProfile{
			{ID: 0, Raw: 1000, Bytes: []int64{1000, 5000, 300, 300}, OpNS: []int64{4e8, 2e8, 1e8},
				CutBytes: 200, CutNS: 5e7, CutFinishNS: 3e8},
			{ID: 1, Raw: 500, Bytes: []int64{500, 3000, 300, 300}, OpNS: []int64{2e8, 2e8, 1e8}},
		},
	}
	return p, Resources{LinkBytesPerSec: 100, StorageCores: 1, ComputeCores: 1}
}

func TestSplitCutValue(t *testing.T) {
	// Documented equal to ops.SplitCut, which policy may not import.
	if SplitCut != -1 {
		t.Errorf("SplitCut = %d, want -1", SplitCut)
	}
}

func TestPredictCut(t *testing.T) {
	p, r := cutPair()
	for _, c := range []struct {
		name                     string
		split                    []int
		compress                 []bool
		link, storage, compute   float64
		bytes, storageCPU, compu float64
	}{
		// Sample 1 has no cut: at SplitCut it crosses raw.
		{"both cut", []int{SplitCut, SplitCut}, nil, 7, 0.05, 0.9, 700, 0.05, 0.9},
		{"cut and 2", []int{SplitCut, 2}, nil, 5, 0.45, 0.5, 500, 0.45, 0.5},
		// Compression does not apply at the cut.
		{"cut compressed", []int{SplitCut, 2}, []bool{true, true}, 5, 0.45, 0.5, 500, 0.45, 0.5},
		// Other out-of-range splits clamp.
		{"clamped", []int{-2, 9}, nil, 13, 0.5, 0.7, 1300, 0.5, 0.7},
		{"short", []int{SplitCut}, nil, 7, 0.05, 0.9, 700, 0.05, 0.9},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := predict1(p, r, c.split, c.compress)
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"LinkSeconds", got.LinkSeconds, c.link}, {"StorageSeconds", got.StorageSeconds, c.storage},
				{"ComputeSeconds", got.ComputeSeconds, c.compute}, {"Seconds", got.Seconds, c.link},
				{"Bytes", got.Bytes, c.bytes}, {"StorageCPUSeconds", got.StorageCPUSeconds, c.storageCPU},
				{"ComputeCPUSeconds", got.ComputeCPUSeconds, c.compu},
			} {
				if !near(f.got, f.want) {
					t.Errorf("%s: got %v, want %v", f.name, f.got, f.want)
				}
			}
			if got.Bottleneck != Link {
				t.Errorf("bottleneck: got %v, want %v", got.Bottleneck, Link)
			}
		})
	}
	// Without any cut data SplitCut is split 0 for every sample.
	nc := synthetic.WithoutCut(p)
	if got, want := predict1(nc, r, []int{SplitCut, SplitCut}, nil), predict1(nc, r, []int{0, 0}, nil); got != want {
		t.Errorf("no cut data: got %+v, want %+v", got, want)
	}
}

func TestCutHandmade(t *testing.T) {
	p, r := cutPair()
	opt := one(Optimal, p, r)
	if want := []int{SplitCut, 2}; !slices.Equal(opt.Split, want) || !near(opt.Pred.Seconds, 5) {
		t.Errorf("optimal: got %v at %v s, want %v at 5 s", opt.Split, opt.Pred.Seconds, want)
	}
	if opt.Compress != nil {
		t.Errorf("optimal compresses: %v", opt.Compress)
	}
	// The LP: sample 1 cannot do better than 3 s of link, sample 0 than 2.
	if got := bound1(p, r); !near2(got, 5) {
		t.Errorf("bound: got %v, want 5", got)
	}
	so := one(SOPHON, p, r)
	if want := []int{2, 2}; !slices.Equal(so.Split, want) || !near(so.Pred.Seconds, 6) {
		t.Errorf("sophon: got %v at %v s, want %v at 6 s", so.Split, so.Pred.Seconds, want)
	}
	if got := one(Optimal, synthetic.WithoutCut(p), r); !near(got.Pred.Seconds, 6) {
		t.Errorf("optimal without the cut: got %v s, want 6", got.Pred.Seconds)
	}
}

// TestPropertiesCut runs the properties on profiles with cut data, tiny
// ones against brute force (SplitCut enumerated) and larger ones on the
// rounding path, and compares every plan with the same profile's plans
// without the cut.
func TestPropertiesCut(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	used := [2]int{} // trials whose optimal plan cuts: tiny, larger
	for trial := range 400 {
		var p *profiler.Profile
		tiny := trial < 200
		if tiny {
			n, nops, comp := 1+rng.IntN(4), 2+rng.IntN(2), rng.IntN(2) == 0
			if n == 4 && (comp || nops == 3) {
				n = 3 // keep the brute force small
			}
			p = addRandomCut(rng, randomProfile(rng, n, nops, comp))
		} else {
			n := 20 + rng.IntN(400)
			p = addRandomCut(rng, randomProfile(rng, n, 2+rng.IntN(5), rng.IntN(2) == 0))
		}
		r := randomResources(rng, len(p.Samples))
		opt, bound := checkProperties(t, p, r)
		if slices.Contains(one(Optimal, p, r).Split, SplitCut) {
			used[trial/200]++
		}
		if tiny {
			bf := bruteForce(p, r)
			if !near(opt, bf) {
				t.Errorf("trial %d: optimal %v, brute force %v", trial, opt, bf)
			}
			if bound > bf*(1+1e-9) {
				t.Errorf("trial %d: bound %v > brute force %v", trial, bound, bf)
			}
		}
		nc := synthetic.WithoutCut(p)
		// More options never make the optimum or the LP worse.
		if o := one(Optimal, nc, r).Pred.Seconds; opt > o*(1+1e-9) {
			t.Errorf("trial %d: optimal with the cut %v > without %v", trial, opt, o)
		}
		if b := bound1(nc, r); bound > b*(1+4e-6) {
			t.Errorf("trial %d: bound with the cut %v > without %v", trial, bound, b)
		}
		// The baselines ignore the cut: the same plans either way.
		for _, c := range []struct {
			name string
			f    func(*profiler.Profile) Plan
		}{
			{NameNoOff, func(p *profiler.Profile) Plan { return one(NoOff, p, r) }},
			{NameAllOff, func(p *profiler.Profile) Plan { return one(AllOff, p, r) }},
			{NameResizeOff, func(p *profiler.Profile) Plan { return uniform1(NameResizeOff, 1, p, r) }},
			{NameFastFlow, func(p *profiler.Profile) Plan { return one(FastFlow, p, r) }},
			{NameSOPHON, func(p *profiler.Profile) Plan { return one(SOPHON, p, r) }},
		} {
			with, without := c.f(p), c.f(nc)
			if !reflect.DeepEqual(with, without) {
				t.Errorf("trial %d: %s differs with the cut:\n%+v\n%+v", trial, c.name, with, without)
			}
			if slices.Contains(with.Split, SplitCut) {
				t.Errorf("trial %d: %s uses the cut", trial, c.name)
			}
		}
	}
	t.Logf("optimal cuts in %d of 200 tiny and %d of 200 larger profiles", used[0], used[1])
	if used[0] == 0 || used[1] == 0 {
		t.Errorf("the cut is never used: the test does not exercise it")
	}
}

// imagenetCut is the case the cut is for: ImageNet-like JPEGs of ~110 KB
// that decode to 500x375x3 = 562,500 B, smaller than the 150,528-byte crop
// already, so no split k > 0 sends fewer bytes than the raw file; the cut
// sends ~50 KB for a tenth of the decode's CPU.
func imagenetCut(n int) *profiler.Profile {
	rng := rand.New(rand.NewPCG(21, 22))
	p := &profiler.Profile{Ops: slices.Clone(synthetic.Pipeline), Samples: make([]profiler.SampleProfile, n)}
	jit := func(x float64) int64 { return int64(x * math.Exp(0.1*rng.NormFloat64())) }
	for i := range p.Samples {
		raw := jit(110e3)
		decode := jit(10*float64(raw) + 2*500*375)
		crop := jit(1.3e6)
		p.Samples[i] = profiler.SampleProfile{
			ID: uint64(i), Raw: raw,
			Bytes:       []int64{raw, 562500, 150528, 150528, 602112, 602112},
			OpNS:        []int64{decode, crop, jit(0.05e6), jit(0.1e6), jit(0.15e6)},
			CutBytes:    jit(50e3),
			CutNS:       decode / 10,
			CutFinishNS: jit(10*50e3+2*0.45*500*375) + crop,
		}
	}
	return p
}

func TestCutSpeedup(t *testing.T) {
	p := imagenetCut(5000)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	r := ample // link-bound: 430 Mbit/s, 32 storage cores, 8 compute cores
	r.GPUSamplesPerSec = 0
	nooff, so, opt := one(NoOff, p, r), one(SOPHON, p, r), one(Optimal, p, r)
	if nooff.Pred.Bottleneck != Link {
		t.Fatalf("nooff is %s-bound, want link-bound", nooff.Pred.Bottleneck)
	}
	cuts := 0
	for _, k := range opt.Split {
		if k == SplitCut {
			cuts++
		}
	}
	sx, ox := nooff.Pred.Seconds/so.Pred.Seconds, nooff.Pred.Seconds/opt.Pred.Seconds
	t.Logf("nooff %.3f s, sophon %.3f s (%.3fx), optimal %.3f s (%.3fx, %d of %d samples cut), bound %.3f s",
		nooff.Pred.Seconds, so.Pred.Seconds, sx, opt.Pred.Seconds, ox, cuts, len(p.Samples), bound1(p, r))
	if ox <= 1.4 {
		t.Errorf("optimal speed-up over nooff %.3fx, want > 1.4x", ox)
	}
	if sx < 1 || sx > 1.05 {
		t.Errorf("sophon speed-up over nooff %.3fx, want ~1.0x", sx)
	}
	if without := one(Optimal, synthetic.WithoutCut(p), r).Pred.Seconds; nooff.Pred.Seconds/without > 1.05 {
		t.Errorf("optimal without the cut %.3f s: a speed-up of %.3fx, want ~1.0x", without, nooff.Pred.Seconds/without)
	}
}

// TestSyntheticCut checks synthetic.WithCut's profiles: valid, cut data on
// about 98% of the samples, and a cut of ~46% of the raw bytes on average.
func TestSyntheticCut(t *testing.T) {
	p := synthetic.WithCut(synthetic.Profile("openimages-like", 20000, 1), 1)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var cut, frac float64
	for _, s := range p.Samples {
		if s.HasCut() {
			cut++
			frac += float64(s.CutBytes) / float64(s.Raw)
		}
	}
	if share, mean := cut/float64(len(p.Samples)), frac/cut; share < 0.97 || share > 0.99 || mean < 0.44 || mean > 0.48 {
		t.Errorf("%.3f of the samples cut, to %.3f of their bytes on average; want 0.98 and 0.46", share, mean)
	}
	if q := synthetic.WithoutCut(p); slices.ContainsFunc(q.Samples, func(s profiler.SampleProfile) bool { return s.HasCut() }) {
		t.Errorf("WithoutCut left cut data")
	}
}
