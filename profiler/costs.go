package profiler

import "slices"

// The winner's curse. A profile times each sample's ops once, in one busy
// epoch: the same op on the same sample reads 15-18% apart (the median
// coefficient of variation over four profiles of one set) between two
// recordings. A policy that ranks samples by bytes saved per CPU-ms picks
// the samples whose one timing happened to read cheap, and in the epochs
// that run they cost their average: the quarter of openimages-like:300
// that ranks best for the JPEG cut costs 1.12x what its profile says
// (1.07-1.13x on three other sets), so the storage speed an epoch measures
// against the plan reads low, by more the fewer samples the plan offloads,
// and plans that offload less measure a slower storage agent.
// ExpectCosts takes each cost half way to a least-squares fit on what
// the sample's sizes predict of it (the op's input and output bytes; for
// the cut, the file's and the cut's bytes), as Expect does for the sizes
// that vary with the crop: the fit carries what the ranking should see
// (a large image costs more), the half left of the sample's own timing
// what the sizes miss. The selection bias left is 0.99-1.04x.
// docs/policy.md, "The winner's curse", has the figures.

// ownCost is the weight of a sample's own timing against the fit.
const ownCost = 0.5

// minCostFit is the fewest samples a cost is fitted over; a smaller
// profile keeps its timings.
const minCostFit = 16

// ExpectCosts is p with its samples' op costs (OpNS) and cut costs
// (CutNS, CutFinishNS) moved half way to what their sizes predict (see
// above); p is not changed. Each cost's sum over the samples stays as
// recorded (the fit has an intercept), so an epoch's total is priced as
// before and only the ranking's noise goes.
func ExpectCosts(p *Profile) *Profile {
	if p == nil || len(p.Samples) < minCostFit {
		return p
	}
	out := *p
	out.Samples = slices.Clone(p.Samples)
	for i := range out.Samples {
		out.Samples[i].OpNS = slices.Clone(out.Samples[i].OpNS)
	}
	ss := out.Samples
	for j := range p.N() {
		expectCost(ss, func(s *SampleProfile) *int64 { return &s.OpNS[j] },
			func(s *SampleProfile) (float64, float64, bool) {
				return float64(s.Bytes[j]), float64(s.Bytes[j+1]), len(s.Bytes) > j+1 && len(s.OpNS) > j
			})
	}
	cut := func(s *SampleProfile) (float64, float64, bool) {
		return float64(s.Raw), float64(s.CutBytes), s.HasCut()
	}
	expectCost(ss, func(s *SampleProfile) *int64 { return &s.CutNS }, cut)
	expectCost(ss, func(s *SampleProfile) *int64 { return &s.CutFinishNS }, cut)
	return &out
}

// expectCost moves the cost at(s) of each sample that has one (sizes
// ok, cost > 0) half way to its least-squares fit on the two sizes, kept
// at least half its own timing.
func expectCost(ss []SampleProfile, at func(*SampleProfile) *int64, sizes func(*SampleProfile) (x1, x2 float64, ok bool)) {
	var x1, x2, y []float64
	var idx []int
	for i := range ss {
		a, b, ok := sizes(&ss[i])
		if !ok {
			continue
		}
		if c := *at(&ss[i]); c > 0 {
			x1, x2, y, idx = append(x1, a), append(x2, b), append(y, float64(c)), append(idx, i)
		}
	}
	if len(y) < minCostFit {
		return
	}
	fit := plane(x1, x2, y)
	for k, i := range idx {
		f := max(fit(x1[k], x2[k]), 0)
		*at(&ss[i]) = max(1, int64(ownCost*y[k]+(1-ownCost)*f+0.5))
	}
}

// plane is the least-squares fit y = a + b x1 + c x2, or of one size
// alone where the two are collinear (or one does not vary), or the mean.
func plane(x1, x2, y []float64) func(a, b float64) float64 {
	n := float64(len(y))
	var m1, m2, my float64
	for i := range y {
		m1, m2, my = m1+x1[i]/n, m2+x2[i]/n, my+y[i]/n
	}
	var s11, s12, s22, s1y, s2y float64
	for i := range y {
		d1, d2, dy := x1[i]-m1, x2[i]-m2, y[i]-my
		s11, s12, s22 = s11+d1*d1, s12+d1*d2, s22+d2*d2
		s1y, s2y = s1y+d1*dy, s2y+d2*dy
	}
	var b, c float64
	switch det := s11*s22 - s12*s12; {
	case det > 1e-9*s11*s22 && s11 > 0 && s22 > 0:
		b, c = (s1y*s22-s2y*s12)/det, (s2y*s11-s1y*s12)/det
	case s11 > 0:
		b = s1y / s11
	case s22 > 0:
		c = s2y / s22
	}
	return func(v1, v2 float64) float64 { return my + b*(v1-m1) + c*(v2-m2) }
}
