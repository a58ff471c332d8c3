package profiler

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// TestExpectCosts: on a profile whose costs are a function of the sizes
// and 15% of their own, timed with 15% noise (as measured: docs/policy.md,
// "The winner's curse"), ExpectCosts cuts each sample's error, keeps
// each op's sum, leaves p and small profiles alone, and removes most of
// the selection bias of ranking by bytes saved per CPU-ms: the best
// quarter's true cost over its profiled cost is over 1.05 before and
// within 3% of 1 after.
func TestExpectCosts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const n = 200
	truth := make([][]float64, n)
	p := &Profile{Ops: []string{"decode", "random_resized_crop", "random_horizontal_flip"}, CropSplit: 2}
	for i := range n {
		raw := int64(50_000 + rng.IntN(400_000))
		px := int64(3 * (200_000 + rng.IntN(2_000_000)))
		cut := raw / int64(2+rng.IntN(6))
		own := func(v float64) float64 { return v * (1 + 0.15*rng.NormFloat64()) }
		tr := []float64{own(2e5 + 4*float64(raw) + 1.5*float64(px)), own(1e5 + 0.2*float64(px)), own(3e4), own(1e5 + 3*float64(raw) + 8*float64(cut))}
		truth[i] = tr
		noisy := func(v float64) int64 { return int64(v * (1 + 0.15*rng.NormFloat64())) }
		p.Samples = append(p.Samples, SampleProfile{ID: uint64(i), Raw: raw, Bytes: []int64{raw, px, 150528, 150528},
			OpNS: []int64{noisy(tr[0]), noisy(tr[1]), noisy(tr[2])}, CutBytes: cut, CutNS: noisy(tr[3]), CutFinishNS: noisy(tr[3])})
	}
	orig := slices.Clone(p.Samples[0].OpNS)
	q := ExpectCosts(p)
	if !slices.Equal(p.Samples[0].OpNS, orig) {
		t.Fatal("ExpectCosts changed its argument")
	}
	cost := func(s *SampleProfile, j int) float64 {
		if j == 3 {
			return float64(s.CutNS)
		}
		return float64(s.OpNS[j])
	}
	for j := range 4 {
		var before, after, sp, sq float64
		for i := range n {
			sp, sq = sp+cost(&p.Samples[i], j), sq+cost(&q.Samples[i], j)
			before += math.Pow(math.Log(cost(&p.Samples[i], j)/truth[i][j]), 2)
			after += math.Pow(math.Log(cost(&q.Samples[i], j)/truth[i][j]), 2)
		}
		if math.Abs(sq/sp-1) > 1e-3 {
			t.Errorf("cost %d: sum %.0f after, %.0f before", j, sq, sp)
		}
		if r := math.Sqrt(after / before); r > 0.9 {
			t.Errorf("cost %d: rms log error %.3f of before's, want at most 0.9", j, r)
		}
	}
	// The cut's best quarter by bytes saved per CPU-ms.
	bias := func(pr *Profile) float64 {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		gain := func(i int) float64 {
			s := &pr.Samples[i]
			return float64(s.Raw-s.CutBytes) / float64(s.CutNS)
		}
		sort.Slice(idx, func(a, b int) bool { return gain(idx[a]) > gain(idx[b]) })
		var tr, pc float64
		for _, i := range idx[:n/4] {
			tr, pc = tr+truth[i][3], pc+float64(pr.Samples[i].CutNS)
		}
		return tr / pc
	}
	if b, a := bias(p), bias(q); b < 1.05 || math.Abs(a-1) > 0.03 {
		t.Errorf("best quarter's true / profiled cut cost: %.3f before, %.3f after; want over 1.05, then within 3%% of 1", b, a)
	}
	small := &Profile{Ops: p.Ops, Samples: p.Samples[:minCostFit-1]}
	if ExpectCosts(small) != small {
		t.Error("a profile under minCostFit samples was changed")
	}
	if ExpectCosts(nil) != nil {
		t.Error("ExpectCosts(nil) is not nil")
	}
}
