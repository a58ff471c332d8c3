package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/profiler"
)

// randomProfile draws n samples over nops ops with sizes that grow or
// shrink at random, and compression data when comp.
func randomProfile(rng *rand.Rand, n, nops int, comp bool) *profiler.Profile {
	p := &profiler.Profile{Ops: make([]string, nops), Samples: make([]profiler.SampleProfile, n)}
	for j := range p.Ops {
		p.Ops[j] = fmt.Sprintf("op%d", j)
	}
	if nops > 1 && rng.IntN(2) == 0 {
		p.Ops[1] = "random_resized_crop"
	}
	for i := range p.Samples {
		s := profiler.SampleProfile{ID: uint64(i), Bytes: make([]int64, nops+1), OpNS: make([]int64, nops)}
		s.Bytes[0] = 1 + rng.Int64N(1e6)
		s.Raw = s.Bytes[0]
		for k := 1; k <= nops; k++ {
			s.Bytes[k] = max(1, int64(float64(s.Bytes[k-1])*math.Exp(rng.NormFloat64())))
			s.OpNS[k-1] = rng.Int64N(5e6)
		}
		if comp {
			s.Compressed = make([]int64, nops+1)
			s.CompressNS = make([]int64, nops+1)
			s.DecompressNS = make([]int64, nops+1)
			for k, b := range s.Bytes {
				s.Compressed[k] = max(1, int64(float64(b)*(0.2+0.8*rng.Float64())))
				s.CompressNS[k] = int64(float64(b) * 5 * rng.Float64())
				s.DecompressNS[k] = int64(float64(b) * rng.Float64())
			}
		}
		p.Samples[i] = s
	}
	return p
}

func randomResources(rng *rand.Rand, n int) Resources {
	// Scales around the profile's: ~500 KB and ~10 ms per sample.
	r := Resources{
		LinkBytesPerSec: 1e5 * math.Exp(2*rng.NormFloat64()),
		StorageCores:    0.5 * math.Exp(2*rng.NormFloat64()),
		ComputeCores:    0.5 * math.Exp(2*rng.NormFloat64()),
		StorageSpeed:    math.Exp(0.5 * rng.NormFloat64()),
	}
	if rng.IntN(3) == 0 {
		r.GPUSamplesPerSec = 100 * math.Exp(rng.NormFloat64())
	}
	if rng.IntN(8) == 0 {
		r.StorageCores = 0
	}
	if rng.IntN(2) == 0 {
		// Sending costs the storage side too: a few ns per byte.
		r.StorageNSPerByte = 5 * math.Exp(rng.NormFloat64())
	}
	if rng.IntN(2) == 0 {
		// And receiving costs the compute side: about a ms per sample.
		r.ComputeNSPerSample = 1e6 * math.Exp(rng.NormFloat64())
	}
	return r
}

// bruteForce is the best predicted epoch over every joint assignment,
// SplitCut included where the profile has cut data.
func bruteForce(p *profiler.Profile, r Resources) float64 {
	n, nops := len(p.Samples), p.N()
	comp := len(p.Samples) > 0 && p.Samples[0].Compressed != nil
	nc := 1
	if comp {
		nc = 2
	}
	first := 0
	if nops >= 2 && slices.ContainsFunc(p.Samples, func(s profiler.SampleProfile) bool { return s.HasCut() }) {
		first = SplitCut
	}
	split, compress := make([]int, n), make([]bool, n)
	best := math.Inf(1)
	var rec func(i int)
	rec = func(i int) {
		if i == n {
			best = min(best, predict1(p, r, split, compress).Seconds)
			return
		}
		for k := first; k <= nops; k++ {
			for c := range nc {
				if k == SplitCut && c == 1 {
					continue // the cut does not compress
				}
				split[i], compress[i] = k, c == 1
				rec(i + 1)
			}
		}
	}
	rec(0)
	return best
}

// addRandomCut gives about three quarters of p's samples random cut data
// (p must have at least two ops), in place, and returns p.
func addRandomCut(rng *rand.Rand, p *profiler.Profile) *profiler.Profile {
	for i := range p.Samples {
		s := &p.Samples[i]
		if rng.IntN(4) == 0 {
			continue
		}
		s.CutBytes = max(1, int64(float64(s.Bytes[0])*rng.Float64()))
		s.CutNS = rng.Int64N(2e6)
		s.CutFinishNS = rng.Int64N(8e6)
	}
	return p
}

// checkProperties asserts what must hold for every profile.
func checkProperties(t *testing.T, p *profiler.Profile, r Resources) (opt, bound float64) {
	t.Helper()
	plans := all1(p, r)
	byName := map[string]Plan{}
	for _, pl := range plans {
		byName[pl.Policy] = pl
		// Every plan's prediction agrees with Predict on its own decisions.
		if got := predict1(p, r, pl.Split, pl.Compress); !near(got.Seconds, pl.Pred.Seconds) {
			t.Errorf("%s: Pred %v, Predict %v", pl.Policy, pl.Pred.Seconds, got.Seconds)
		}
	}
	bound = bound1(p, r)
	opt = byName[NameOptimal].Pred.Seconds
	slack := 1e-9 * max(opt, 1e-300)
	if s, n := byName[NameSOPHON].Pred.Seconds, byName[NameNoOff].Pred.Seconds; s > n+slack {
		t.Errorf("sophon %v > nooff %v", s, n)
	}
	for _, pl := range plans {
		if opt > pl.Pred.Seconds+slack {
			t.Errorf("optimal %v > %s %v", opt, pl.Policy, pl.Pred.Seconds)
		}
	}
	if bound > opt+slack {
		t.Errorf("bound %v > optimal %v", bound, opt)
	}
	// Determinism.
	if again := all1(p, r); !reflect.DeepEqual(plans, again) {
		t.Errorf("plans differ between two runs")
	}
	if b := bound1(p, r); b != bound {
		t.Errorf("bound differs between two runs: %v, %v", bound, b)
	}
	return opt, bound
}

func TestPropertiesTiny(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worst := 1.0
	for trial := range 300 {
		n, nops, comp := 1+rng.IntN(4), 1+rng.IntN(3), rng.IntN(2) == 0
		if comp && n == 4 && nops == 3 {
			nops = 2 // keep the brute force small
		}
		p := randomProfile(rng, n, nops, comp)
		r := randomResources(rng, n)
		opt, bound := checkProperties(t, p, r)
		bf := bruteForce(p, r)
		if !near(opt, bf) {
			t.Errorf("trial %d: optimal %v, brute force %v", trial, opt, bf)
		}
		if bound > bf*(1+1e-9) {
			t.Errorf("trial %d: bound %v > brute force %v", trial, bound, bf)
		}
		// The rounding path Optimal takes on larger profiles, against the
		// true optimum.
		if h := roundedEpoch(p, r); h < bf*(1-1e-9) {
			t.Errorf("trial %d: rounding %v beats brute force %v", trial, h, bf)
		} else if bf > 0 {
			worst = max(worst, h/bf)
		}
	}
	t.Logf("worst rounding/optimum over tiny profiles: %.4f", worst)
}

// TestRoundingSmall compares the rounding path with brute force on
// profiles of 8-10 samples.
func TestRoundingSmall(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var worst, sum float64
	const trials = 30
	for range trials {
		p := randomProfile(rng, 8+rng.IntN(3), 2, false)
		r := randomResources(rng, len(p.Samples))
		bf := bruteForce(p, r)
		h := roundedEpoch(p, r)
		if h < bf*(1-1e-9) {
			t.Fatalf("rounding %v beats brute force %v", h, bf)
		}
		if bf > 0 {
			worst = max(worst, h/bf)
			sum += h / bf
		}
	}
	t.Logf("rounding/optimum on 8-10 samples: worst %.4f, mean %.4f", worst, sum/trials)
}

// TestPropertiesRandom runs the properties on profiles too large to
// enumerate, where Optimal takes its LP-rounding path, and checks how close
// it comes to the bound.
func TestPropertiesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	worst := 0.0
	for range 60 {
		n := 20 + rng.IntN(500)
		p := randomProfile(rng, n, 1+rng.IntN(6), rng.IntN(2) == 0)
		r := randomResources(rng, n)
		opt, bound := checkProperties(t, p, r)
		if bound > 0 {
			worst = max(worst, opt/bound)
		}
	}
	t.Logf("worst optimal/bound over random profiles: %.4f", worst)
}

// roundedEpoch is the predicted epoch of Optimal's plan on the path it
// takes for profiles too large to enumerate.
func roundedEpoch(p *profiler.Profile, r Resources) float64 {
	cm, _ := OneNode(p, r).model(true)
	cm.exactLimit = 0
	pl, _ := cm.optimal(cm.noOff(), cm.uniform(NameAllOff, cm.m.n), cm.fastFlow(), cm.sophon())
	return pl.Pred.Seconds
}
