package estimate_test

import (
	"flag"
	"math"
	"sync"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/profiler/estimate"
)

const testSeed, testEpoch = 11, 3

type dataset struct {
	samples []estimate.Sample
	data    [][]byte
}

// generated keeps each spec's largest generated dataset: sample i is the
// same image in every call, so the tests share a prefix.
var generated = struct {
	sync.Mutex
	m map[string]dataset
}{m: map[string]dataset{}}

// generate is n images of spec (seed 5) and their headers.
func generate(t testing.TB, spec synth.Spec, n int) dataset {
	t.Helper()
	generated.Lock()
	defer generated.Unlock()
	d := generated.m[spec.Name]
	if have := len(d.data); have < n {
		// Sample i depends on i alone: generate only the ones not yet made.
		more := generateNew(t, spec, have, n)
		d = dataset{samples: append(d.samples[:have:have], more.samples...), data: append(d.data[:have:have], more.data...)}
		generated.m[spec.Name] = d
	}
	return dataset{samples: d.samples[:n:n], data: d.data[:n:n]}
}

// generateNew makes samples from (inclusive) to n (exclusive).
func generateNew(t testing.TB, spec synth.Spec, from, n int) dataset {
	t.Helper()
	d := dataset{samples: make([]estimate.Sample, n-from), data: make([][]byte, n-from)}
	errs := make([]error, n-from)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := from + w; i < n; i += 2 {
				raw, err := spec.Generate(5, i)
				if err != nil {
					errs[i-from] = err
					continue
				}
				h, err := jpeg.ReadHeader(raw)
				errs[i-from] = err
				d.samples[i-from] = estimate.FromHeader(uint64(i), int64(len(raw)), h)
				d.data[i-from] = raw
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// measure records every sample as stage 2 does.
func measure(t testing.TB, p *ops.Pipeline, d dataset) *profiler.Profile {
	t.Helper()
	rec := profiler.NewRecorder(p, "fp", len(d.data))
	for i, raw := range d.data {
		if err := rec.Record(uint64(i), raw, ops.Key{Seed: testSeed, Epoch: testEpoch, Sample: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	return rec.Profile()
}

func estimated(t testing.TB, p *ops.Pipeline, d dataset, n int) *profiler.Profile {
	t.Helper()
	var cal []estimate.Calibrated
	for _, i := range estimate.Pick(d.samples, n) {
		cal = append(cal, estimate.Calibrated{Sample: d.samples[i], Data: d.data[i]})
	}
	m, err := estimate.Calibrate(p, testSeed, testEpoch, cal, ops.DefaultLimits(), 0)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := m.Profile("fp", d.samples)
	if err != nil {
		t.Fatal(err)
	}
	// Profile keeps the calibration samples' records; here every entry is
	// an estimate, so that the gap is what a dataset much larger than its
	// calibration would see.
	for i, s := range d.samples {
		if prof.Samples[i], err = m.Sample(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := prof.Validate(); err != nil {
		t.Fatal(err)
	}
	return prof
}

func sums(p *profiler.Profile) (comp []float64, ops []float64, cut, cutNS, cutFin float64, cuts int) {
	n := p.N()
	comp, ops = make([]float64, n+1), make([]float64, n)
	for _, s := range p.Samples {
		for k := range n + 1 {
			comp[k] += float64(s.Compressed[k])
		}
		for j := range n {
			ops[j] += float64(s.OpNS[j])
		}
		if s.HasCut() {
			cuts++
			cut += float64(s.CutBytes)
			cutNS += float64(s.CutNS)
			cutFin += float64(s.CutFinishNS)
		}
	}
	return
}

func TestEstimateMatchesMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("records a few hundred images")
	}
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec synth.Spec
		n    int
	}{{synth.ImageNetLike, 150}, {synth.OpenImagesLike, 100}} {
		t.Run(tc.spec.Name, func(t *testing.T) {
			d := generate(t, tc.spec, tc.n)
			meas := measure(t, p, d)
			est := estimated(t, p, d, *calibrate)
			if len(est.Samples) != len(meas.Samples) {
				t.Fatalf("got %d samples, want %d", len(est.Samples), len(meas.Samples))
			}
			for i := range meas.Samples {
				e, m := est.Samples[i], meas.Samples[i]
				for k := range m.Bytes {
					if e.Bytes[k] != m.Bytes[k] {
						t.Fatalf("sample %d split %d: got %d bytes, want %d", m.ID, k, e.Bytes[k], m.Bytes[k])
					}
				}
			}
			ec, _, ecut, _, _, ecuts := sums(est)
			mc, _, mcut, _, _, mcuts := sums(meas)
			for k := range mc {
				if rel(ec[k], mc[k]) > 0.10 {
					t.Errorf("split %d: estimated %.0f compressed bytes, measured %.0f", k, ec[k], mc[k])
				}
			}
			if math.Abs(float64(ecuts-mcuts)) > 0.05*float64(len(meas.Samples)) || rel(ecut, mcut) > 0.05 {
				t.Errorf("cut: estimated %d samples, %.0f bytes; measured %d, %.0f", ecuts, ecut, mcuts, mcut)
			}
			// The link is the bottleneck and the CPUs unlimited: the
			// issue's target, a plan within 5% of the measured profile's.
			gap := planGap(t, meas, est, policy.Resources{LinkBytesPerSec: 500e6 / 8})
			if gap > 0.05 {
				t.Errorf("the estimate's plan is %.2f%% slower than the measured profile's, want at most 5%%", 100*gap)
			}
			// With scarce storage CPU the plan also rests on the fitted
			// costs, which are thread CPU time on a shared machine, and
			// the recorded profile they are compared with is as noisy:
			// under make test's streams the estimate alone was up to 42%
			// off, the plan refined after one epoch up to 33% (usually
			// under 3%; docs/policy.md). The bounds are above that, so
			// load does not fail the test while a mispriced feature does
			// (a header bomb priced as its decode made plans 10-200x off).
			var again *profiler.Profile
			if *remeasure {
				again = measure(t, p, d)
			}
			for _, r := range []policy.Resources{
				{LinkBytesPerSec: 200e6 / 8, StorageCores: 0.5, ComputeCores: 4},
				{LinkBytesPerSec: 500e6 / 8, StorageCores: 1, ComputeCores: 8},
				{LinkBytesPerSec: 500e6 / 8, StorageCores: 0.25, ComputeCores: 8},
			} {
				if gap := planGap(t, meas, est, r); gap > scarceEstimateGap {
					t.Errorf("storage %.2f cores: the estimate's plan is %.1f%% slower than the measured profile's, want at most %.0f%%", r.StorageCores, 100*gap, 100*scarceEstimateGap)
				}
				// What the compute agent plans from after the estimate's
				// plan ran one epoch: the estimate refined with what that
				// epoch measured of each sample at its split.
				refined := gapOn(meas, refineAfter(meas, est, r), r)
				t.Logf("  refined after one epoch of the estimate's plan: gap %.2f%%", 100*refined)
				if refined > scarceRefinedGap {
					t.Errorf("storage %.2f cores: refined after one epoch, the plan is %.1f%% slower than the measured profile's, want at most %.0f%%", r.StorageCores, 100*refined, 100*scarceRefinedGap)
				}
				if again != nil {
					// The noise floor: both plans on a second record of the
					// same epoch, against that record's own plan (which
					// fits its own timing noise, as meas's plan does meas's).
					t.Logf("  on a second record: the first record's plan %.2f%%, the estimate's %.2f%%",
						100*gapOn(again, meas, r), 100*gapOn(again, est, r))
				}
			}
		})
	}
}

// The largest gaps TestEstimateMatchesMeasured accepts where the storage
// CPU is scarce: the estimate's own plan, and the plan refined after one
// epoch of it.
const (
	scarceEstimateGap = 1.0
	scarceRefinedGap  = 1.0
)

// remeasure also records every sample a second time and reports both
// plans' gaps on that record (go test -run Estimate -v -args -remeasure).
var calibrate = flag.Int("calibrate", 32, "calibration samples")

var remeasure = flag.Bool("remeasure", false, "report the plans' gaps on a second record too")

// gapOn is how much slower, on profile on, the optimal plan of from is
// than on's own.
func gapOn(on, from *profiler.Profile, r policy.Resources) float64 {
	plan := optimal(from, r)
	return predict(on, r, plan.Split, plan.Compress).Seconds/optimal(on, r).Pred.Seconds - 1
}

// optimal is policy.Optimal's plan of p on one node under r.
func optimal(p *profiler.Profile, r policy.Resources) policy.Plan {
	pl, err := policy.Optimal(policy.OneNode(p, r))
	if err != nil {
		panic(err)
	}
	return pl
}

// predict is policy.Predict on one node under r, in totals.
func predict(p *profiler.Profile, r policy.Resources, split []int, compress []bool) policy.Prediction {
	cp, err := policy.Predict(policy.OneNode(p, r), nil, split, compress)
	if err != nil {
		panic(err)
	}
	return cp.Totals()
}

func rel(got, want float64) float64 { return math.Abs(got-want) / want }

// planGap is how much slower, on the measured profile, the estimate's
// optimal plan is than the measured profile's own.
func planGap(t *testing.T, meas, est *profiler.Profile, r policy.Resources) float64 {
	best := optimal(meas, r)
	plan := optimal(est, r)
	got := predict(meas, r, plan.Split, plan.Compress)
	gap := got.Seconds/best.Pred.Seconds - 1
	t.Logf("link %.0f Mbit/s, storage %.2f cores, compute %.0f: measured profile's plan %.4f s (%s), the estimate's %.4f s on the measured profile (%s): gap %.2f%%",
		r.LinkBytesPerSec*8/1e6, r.StorageCores, r.ComputeCores, best.Pred.Seconds, best.Pred.Bottleneck, got.Seconds, got.Bottleneck, 100*gap)
	return gap
}

// refineAfter is est refined (profiler.Refine) with what one epoch of
// est's optimal plan under r measures of each sample, taking meas for the
// truth: the payload at its split and both sides' CPU.
func refineAfter(meas, est *profiler.Profile, r policy.Resources) *profiler.Profile {
	plan := optimal(est, r)
	var obs []profiler.Observation
	for i, k := range plan.Split {
		m := &meas.Samples[i]
		n := len(m.OpNS)
		o := profiler.Observation{ID: m.ID, Split: k}
		switch {
		case k == ops.SplitCut:
			if !m.HasCut() {
				continue
			}
			o.Payload, o.StorageNS, o.LocalNS = m.CutBytes, m.CutNS, m.CutFinishNS
			for _, ns := range m.OpNS[2:] {
				o.LocalNS += ns
			}
		default:
			o.Payload, o.StorageNS = m.Bytes[k], m.PrefixNS(k)
			for _, ns := range m.OpNS[k:n] {
				o.LocalNS += ns
			}
			if plan.Compress != nil && plan.Compress[i] && len(m.Compressed) > k {
				o.Compressed, o.Payload = true, m.Compressed[k]
				o.StorageNS += m.CompressNS[k]
				o.LocalNS += m.DecompressNS[k]
			}
		}
		obs = append(obs, o)
	}
	out, _ := profiler.Refine(est, obs)
	return out
}
