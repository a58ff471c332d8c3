package policy

import (
	"math"
	"slices"

	"github.com/sophon-dl/sophon/profiler"
)

// Bound is the optimum of the LP relaxation of the planning problem: the
// smallest T such that every sample takes a convex combination of its
// options (split k, compressed or not, and SplitCut where the sample has
// the cut's measurements) and the summed link, storage CPU and
// compute CPU times are each at most T, and T >= samples/GPUSamplesPerSec.
// No plan, fractional or not, predicts less, so it is a lower bound on
// every policy's predicted epoch time.
//
// It is computed by Lagrangian duality: for weights w on the 2-simplex,
// g(w) = sum over samples of min over options of w.(link, storage,
// compute seconds) is at most the LP optimum, and the LP optimum is the
// maximum of g. Bound returns the best g(w) found (so it is always a valid
// lower bound) after Kelley's cutting-plane method has certified it within
// a relative 1e-6 of the maximum, or after 200 iterations, whichever comes
// first; see boundTol.
func Bound(p *profiler.Profile, r Resources) float64 {
	m := newDualModel(p, r, true)
	d := m.dual()
	return max(d.lb, m.gpu)
}

// boundTol is the relative gap between the best dual value and the
// cutting-plane model's maximum (an upper bound on the LP optimum) at which
// the dual search stops.
const boundTol = 1e-6

// boundIters caps the cutting-plane iterations.
const boundIters = 200

// dualModel is the single-node model's prices: seconds per byte, per
// storage ns and per compute ns, and the GPU's seconds.
type dualModel struct {
	*model
	r     Resources
	scale [3]float64
	gpu   float64
}

func newDualModel(p *profiler.Profile, r Resources, cut bool) *dualModel {
	m := &dualModel{model: newModel(p, r.StorageSpeed, r.StorageNSPerByte, cut), r: r}
	m.prices()
	return m
}

func (m *dualModel) prices() {
	r := m.r
	if r.LinkBytesPerSec > 0 {
		m.scale[0] = 1 / r.LinkBytesPerSec
	}
	if r.StorageCores > 0 {
		m.scale[1] = 1e-9 / (speedOr1(r.StorageSpeed) * r.StorageCores)
	}
	if r.ComputeCores > 0 {
		m.scale[2] = 1e-9 / r.ComputeCores
	}
	if r.GPUSamplesPerSec > 0 {
		m.gpu = float64(len(m.p.Samples)) / r.GPUSamplesPerSec
	}
}

// secs converts raw quantities into the three resource times.
func (m *dualModel) secs(q raw) [3]float64 {
	return [3]float64{q[0] * m.scale[0], q[1] * m.scale[1], q[2] * m.scale[2]}
}

// totals sums the raw quantities of the chosen options.
func (m *dualModel) totals(ch []int32) raw {
	buf := make([]raw, m.nopt())
	var tot raw
	for i := range m.p.Samples {
		m.options(&m.p.Samples[i], buf)
		q := buf[ch[i]]
		tot[0] += q[0]
		tot[1] += q[1]
		tot[2] += q[2]
	}
	return tot
}

type dualResult struct {
	lb, ub float64    // lb <= LP optimum (of link, storage, compute) <= ub
	w      [3]float64 // weights attaining lb
	iters  int
}

// eval returns g(w) and the resource seconds of the plan that attains it
// (each sample at its cheapest option under w; exact ties go to the option
// with the smaller unweighted sum of seconds, then the smaller index). If
// ch is non-nil it receives the options.
//
// NB: this is the hot loop of Bound and Optimal; it prices option (k, c)
// as a0*bytes + a1*storage + a2*compute with a = w scaled to seconds, and
// since storage + compute ns of an uncompressed option is the sample's
// total, it drops the per-sample constant a2*total until the minimum is
// known. The compressed options and the cut do not have that sum and are
// priced in full, less the same constant.
func (m *dualModel) eval(w [3]float64, ch []int32) (float64, [3]float64) {
	a := [3]float64{w[0] * m.scale[0], w[1] * m.scale[1], w[2] * m.scale[2]}
	d := a[1] - a[2]
	// A byte also costs the storage side perByte ns to send.
	a0 := a[0] + a[1]*m.perByte
	var g float64
	var tot raw
	for i := range m.p.Samples {
		s := &m.p.Samples[i]
		var total float64
		for _, ns := range s.OpNS {
			total += float64(ns)
		}
		comp := m.stride == 2 && len(s.Compressed) == m.n+1
		hasC, hasD := len(s.CompressNS) == m.n+1, len(s.DecompressNS) == m.n+1
		best, bestV := 0, float64(s.Bytes[0])*a0
		var bestQ raw
		bestQ = raw{float64(s.Bytes[0]), 0, total}
		var pre, pre2 float64
		for k := 0; k <= m.n; k++ {
			if k > 0 {
				pre += float64(s.OpNS[k-1])
				if k == 2 {
					pre2 = pre
				}
				q := raw{float64(s.Bytes[k]), pre, total - pre}
				if v := a0*q[0] + d*pre; v <= bestV {
					if v < bestV || m.sum(q) < m.sum(bestQ) {
						best, bestV, bestQ = k*m.stride, v, q
					}
				}
			}
			if comp {
				q := raw{float64(s.Compressed[k]), pre, total - pre}
				if hasC {
					q[1] += float64(s.CompressNS[k])
				}
				if hasD {
					q[2] += float64(s.DecompressNS[k])
				}
				if v := a0*q[0] + a[1]*q[1] + a[2]*q[2] - a[2]*total; v <= bestV {
					if v < bestV || m.sum(q) < m.sum(bestQ) {
						best, bestV, bestQ = k*m.stride+1, v, q
					}
				}
			}
		}
		if m.cut && s.HasCut() {
			cb, cns, cfin := float64(s.CutBytes), float64(s.CutNS), float64(s.CutFinishNS)
			if v := a0*cb + a[1]*cns + a[2]*(cfin-pre2); v <= bestV {
				if q := (raw{cb, cns, cfin + total - pre2}); v < bestV || m.sum(q) < m.sum(bestQ) {
					best, bestV, bestQ = m.cutOpt, v, q
				}
			}
		}
		g += bestV + a[2]*total
		tot[0] += bestQ[0]
		tot[1] += bestQ[1] + bestQ[0]*m.perByte
		tot[2] += bestQ[2]
		if ch != nil {
			ch[i] = int32(best)
		}
	}
	return g, m.secs(tot)
}

// sum is the unweighted sum of an option's resource seconds.
func (m *dualModel) sum(q raw) float64 {
	s := m.secs(q)
	return s[0] + s[1] + s[2]
}

// dual maximises g over the 2-simplex with Kelley's cutting-plane method:
// every evaluation at w yields a plan whose totals v satisfy g(w') <= w'.v
// for all w', so min over the cuts of w'.v is an upper model of g; the next
// point is the model's maximiser (found by nested golden-section search,
// exact to ~1e-12 in w, which is ample as the model is concave and
// piecewise linear in two variables), and the model's maximum bounds the LP
// optimum from above.
func (m *dualModel) dual() dualResult {
	var cuts [][3]float64
	res := dualResult{lb: math.Inf(-1), ub: math.Inf(1)}
	try := func(w [3]float64) {
		g, v := m.eval(w, nil)
		cuts = append(cuts, v)
		if g > res.lb {
			res.lb, res.w = g, w
		}
	}
	for _, w := range [][3]float64{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1.0 / 3, 1.0 / 3, 1.0 / 3}} {
		try(w)
	}
	for res.iters = 0; res.iters < boundIters; res.iters++ {
		w, ub := maximiseModel(cuts)
		res.ub = min(res.ub, ub)
		if res.ub-res.lb <= boundTol*res.ub || res.ub <= 0 {
			break
		}
		try(w)
	}
	return res
}

// modelAt is min over cuts of w.v.
func modelAt(cuts [][3]float64, w [3]float64) float64 {
	v := math.Inf(1)
	for _, c := range cuts {
		v = min(v, w[0]*c[0]+w[1]*c[1]+w[2]*c[2])
	}
	return v
}

// golden maximises a concave f on [lo, hi].
func golden(f func(float64) float64, lo, hi float64) (float64, float64) {
	const phi = 0.6180339887498949
	a, b := lo, hi
	x1, x2 := b-phi*(b-a), a+phi*(b-a)
	f1, f2 := f(x1), f(x2)
	for range 64 {
		if f1 < f2 {
			a, x1, f1 = x1, x2, f2
			x2 = a + phi*(b-a)
			f2 = f(x2)
		} else {
			b, x2, f2 = x2, x1, f1
			x1 = b - phi*(b-a)
			f1 = f(x1)
		}
	}
	// The endpoints matter when the maximum sits on the boundary.
	best, fb := x1, f1
	for _, x := range []float64{x2, lo, hi} {
		if fx := f(x); fx > fb {
			best, fb = x, fx
		}
	}
	return best, fb
}

// maximiseModel maximises the cutting-plane model over the 2-simplex:
// outer search over w0, inner over w1 (the inner maximum of a concave
// function is concave in w0).
func maximiseModel(cuts [][3]float64) ([3]float64, float64) {
	inner := func(w0 float64) (float64, float64) {
		return golden(func(w1 float64) float64 {
			return modelAt(cuts, [3]float64{w0, w1, max(0, 1-w0-w1)})
		}, 0, 1-w0)
	}
	w0, v := golden(func(w0 float64) float64 { _, v := inner(w0); return v }, 0, 1)
	w1, _ := inner(w0)
	return [3]float64{w0, w1, max(0, 1-w0-w1)}, v
}

// exactLimit is the largest number of joint assignments Optimal enumerates
// exhaustively (tiny profiles only).
const exactLimit = 1 << 16

// Optimal minimises the predicted epoch time over per-sample splits and
// per-sample compression, using every split point (SplitCut included,
// where the profile has the cut's measurements) and all four resources.
//
// Method: the dual weights w* from Bound price the three resources; every
// sample takes its cheapest option under w* (the LP's optimal support up to
// ties), and a local improvement pass then repeatedly moves samples off the
// bottleneck resource, cheapest first by w*-cost per second saved there,
// accepting each move only while the predicted epoch time strictly falls,
// for up to improveRounds rounds or until the plan is within improveTol of
// the bound. The result is compared with the baselines' plans and the best one kept, so
// Optimal never predicts worse than any of them. Profiles with at most
// exactLimit joint assignments are solved exhaustively instead. The cost is
// O(N * options) per dual iteration and per improvement round plus a sort,
// so O(N log N) overall.
func Optimal(p *profiler.Profile, r Resources) Plan {
	cm := singleModel(p, r, true)
	m := &dualModel{model: cm.m, r: r}
	m.prices()
	ch, ok := m.exact()
	if !ok {
		ch = m.rounded(cm)
	}
	opt := make([]uint8, len(ch))
	for i, o := range ch {
		opt[i] = uint8(o)
	}
	return singlePlan(cm.plan(NameOptimal, make([]int16, len(ch)), opt))
}

// rounded is Optimal's LP-rounding path: the dual's cheapest options,
// improved locally, or an improved baseline where that is better.
func (m *dualModel) rounded(cm *cmodel) []int32 {
	p := m.p
	d := m.dual()
	ch := make([]int32, len(p.Samples))
	m.eval(d.w, ch)
	target := max(d.lb, m.gpu) * (1 + improveTol)
	best := m.improve(ch, d.w, target)
	bestT := m.epoch(best)
	bases := []Plan{cm.noOff(), cm.uniform(NameAllOff, m.n), cm.fastFlow(), cm.sophon()}
	if k := CropSplit(p); k >= 0 {
		bases = append(bases, cm.uniform(NameResizeOff, k))
	}
	for _, b := range bases {
		if b.Pred.Seconds < bestT {
			c := m.improve(m.choices(b.Split, b.Compress), d.w, target)
			if t := m.epoch(c); t < bestT {
				best, bestT = c, t
			}
		}
	}
	return best
}

// epoch is the predicted epoch time of options ch.
func (m *dualModel) epoch(ch []int32) float64 {
	s := m.secs(m.totals(ch))
	return max(s[0], s[1], s[2], m.gpu)
}

// exact enumerates every joint assignment of tiny profiles.
func (m *dualModel) exact() ([]int32, bool) {
	n := len(m.p.Samples)
	combos := 1
	for range n {
		combos *= m.nopt()
		if combos > exactLimit {
			return nil, false
		}
	}
	opts := make([][]raw, n)
	for i := range opts {
		opts[i] = make([]raw, m.nopt())
		m.options(&m.p.Samples[i], opts[i])
	}
	cur := make([]int32, n)
	best := make([]int32, n)
	bestT := math.Inf(1)
	var rec func(i int, tot raw)
	rec = func(i int, tot raw) {
		if i == n {
			s := m.secs(tot)
			if t := max(s[0], s[1], s[2], m.gpu); t < bestT {
				bestT = t
				copy(best, cur)
			}
			return
		}
		for o, q := range opts[i] {
			if math.IsInf(q[0], 1) {
				continue
			}
			cur[i] = int32(o)
			rec(i+1, raw{tot[0] + q[0], tot[1] + q[1], tot[2] + q[2]})
		}
	}
	rec(0, raw{})
	return best, true
}

// improveRounds caps the local improvement rounds.
const improveRounds = 16

// improveTol is the relative distance to the bound at which the local
// improvement stops: below it a round (a full pass and a sort) gains less
// than it costs.
const improveTol = 1e-6

// improve runs the local improvement pass on a copy of in, stopping once
// the predicted epoch is at most target.
func (m *dualModel) improve(in []int32, w [3]float64, target float64) []int32 {
	ch := slices.Clone(in)
	tot := m.secs(m.totals(ch))
	buf := make([]raw, m.nopt())
	type move struct {
		cost float64
		i    int32
		o    int32
	}
	var moves []move
	for range improveRounds {
		r := 0
		for j := 1; j < 3; j++ {
			if tot[j] > tot[r] {
				r = j
			}
		}
		if tot[r] <= target {
			break // within the tolerance of the bound: nothing to gain
		}
		moves = moves[:0]
		for i := range m.p.Samples {
			m.options(&m.p.Samples[i], buf)
			cur := m.secs(buf[ch[i]])
			bo, bc := -1, 0.0
			for o, q := range buf {
				if math.IsInf(q[0], 1) {
					continue
				}
				s := m.secs(q)
				gain := cur[r] - s[r]
				if gain <= 0 {
					continue
				}
				c := (w[0]*(s[0]-cur[0]) + w[1]*(s[1]-cur[1]) + w[2]*(s[2]-cur[2])) / gain
				if bo < 0 || c < bc {
					bo, bc = o, c
				}
			}
			if bo >= 0 {
				moves = append(moves, move{bc, int32(i), int32(bo)})
			}
		}
		slices.SortFunc(moves, func(a, b move) int {
			if a.cost != b.cost {
				if a.cost < b.cost {
					return -1
				}
				return 1
			}
			return int(a.i - b.i)
		})
		improved := false
		for _, mv := range moves {
			m.options(&m.p.Samples[mv.i], buf)
			cur, nxt := m.secs(buf[ch[mv.i]]), m.secs(buf[mv.o])
			next := [3]float64{tot[0] - cur[0] + nxt[0], tot[1] - cur[1] + nxt[1], tot[2] - cur[2] + nxt[2]}
			if max(next[0], next[1], next[2]) < max(tot[0], tot[1], tot[2]) {
				tot, ch[mv.i], improved = next, mv.o, true
			}
		}
		if !improved {
			break
		}
	}
	return ch
}
