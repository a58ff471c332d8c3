// Package dual is the cluster bound's dual search (package relax, for
// policy's Bound): it maximises a Lagrangian dual over the weights simplex
// by Kelley's cutting planes, with the caller pricing plans at given
// weights and this package choosing the weights: over any number of
// resources with the restricted master LP of package lp (Search), or over
// three with a golden-section maximiser of the model (Simplex3). It knows
// nothing of clusters or samples: a plan is its loads and the caller's
// encoding of it. It is pure arithmetic: no I/O, goroutines or clock.
package dual

import (
	"math"
	"slices"

	"github.com/sophon-dl/sophon/policy/internal/lp"
)

// The search's limits.
const (
	// Iters caps a search's iterations, both runs of Search together.
	Iters = 400
	// maxRows caps the master's active resource rows; maxCuts the plans
	// it keeps (older, unused ones are dropped beyond it).
	maxRows = 512
	maxCuts = 256
)

// Cut is one plan, a cut of Kelley's model: its load on every resource
// and, per item the caller prices (a bucket of samples), the column it
// takes, which Search only carries (and Remap rewrites).
type Cut struct {
	Loads  []float64
	Choice []uint16
}

// Oracle prices every item at the weights w (one per resource, on the
// simplex): it returns the Lagrangian dual value at w, a lower bound on
// the LP, and the plan that attains it.
type Oracle func(w []float64) (float64, *Cut)

// Solution is what a search found.
type Solution struct {
	W            []float64 // weights with the best dual value, Lower; nil if none
	Lower, Upper float64   // best dual value; best fractional plan's epoch
	Cuts         []*Cut    // the plans of the best fractional plan
	Lam          []float64 // and their weights
	Iters        int
}

// Search is the cutting-plane search's state, kept between runs so that
// a later run (on refined items, after Remap) goes on from the plans the
// earlier one found.
type Search struct {
	Sol    Solution
	nres   int
	cuts   []*Cut
	rows   []int32
	active []bool
	ms     *lp.Master
}

// NewSearch returns a search over nres resources (at least one).
func NewSearch(nres int) *Search {
	return &Search{nres: nres, Sol: Solution{Lower: math.Inf(-1), Upper: math.Inf(1)}}
}

// eval prices the items at w and adds the plan as a cut.
func (s *Search) eval(price Oracle, w []float64) *Cut {
	g, cut := price(w)
	if g > s.Sol.Lower {
		s.Sol.Lower, s.Sol.W = g, w
	}
	s.cuts = append(s.cuts, cut)
	return cut
}

func (s *Search) loads() [][]float64 {
	v := make([][]float64, len(s.cuts))
	for k, c := range s.cuts {
		v[k] = c.Loads
	}
	return v
}

// start evaluates uniform weights and starts the master from that plan,
// with every resource it loads to half its largest load or more as rows
// (the most loaded maxRows of them).
func (s *Search) start(price Oracle) {
	w0 := make([]float64, s.nres)
	for r := range w0 {
		w0[r] = 1 / float64(s.nres)
	}
	first := s.eval(price, w0)
	order := make([]int32, s.nres)
	for r := range order {
		order[r] = int32(r)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmpDesc(first.Loads[a], first.Loads[b]) })
	top := first.Loads[order[0]]
	s.active = make([]bool, s.nres)
	for _, r := range order {
		if len(s.rows) > 0 && (first.Loads[r] < top/2 || len(s.rows) >= maxRows) {
			break
		}
		s.rows, s.active[r] = append(s.rows, r), true
	}
	s.ms = &lp.Master{}
	s.ms.SetRows(s.rows, s.loads())
}

// Run maximises the dual of the items price prices, with Kelley's cutting
// planes, stabilised (the next point is halfway between the best point and
// the master's, falling back to the master's when that gives no cut), and
// row generation (the master carries only the resources some plan loads
// near the top), until the LP's bounds Sol.Lower and Sol.Upper meet within
// tol (relative), or Iters iterations in all. The first run starts from
// uniform weights; a later one (after Remap) from the best weights so far,
// whose value it recomputes.
func (s *Search) Run(price Oracle, tol float64) {
	sol := &s.Sol
	if s.ms == nil {
		s.start(price)
	} else {
		// The old lower bound is the coarser items' (too high for
		// these); the old plans are still plans of these items, with
		// the same loads.
		w := sol.W
		sol.Lower = math.Inf(-1)
		s.ms.AddCol(s.eval(price, w).Loads)
	}
	mixed := make([]float64, s.nres)
	for ; sol.Iters < Iters; sol.Iters++ {
		s.ms.Solve()
		if s.ms.Broken() {
			break
		}
		t, added := s.mix(mixed)
		if added {
			s.ms.SetRows(s.rows, s.loads())
			continue
		}
		if sol.Upper-sol.Lower <= tol*sol.Upper {
			break
		}
		s.step(price, t)
	}
	if len(sol.Cuts) == 0 { // only if every iteration added rows
		sol.Cuts, sol.Lam, sol.Upper = s.cuts[:1], []float64{1}, lp.MaxOf(s.cuts[0].Loads)
	}
}

// mix sets mixed to the loads of the master's fractional plan and returns
// the master's value. A resource off the master that the mix overloads
// joins it (row generation; added reports it); otherwise the mix, if it
// is the best so far, becomes Sol's fractional plan.
func (s *Search) mix(mixed []float64) (t float64, added bool) {
	sol := &s.Sol
	lam := s.ms.Lambdas()
	clear(mixed)
	for k, l := range lam {
		if l > 0 {
			for r, x := range s.cuts[k].Loads {
				mixed[r] += l * x
			}
		}
	}
	t = s.ms.Value()
	for r, x := range mixed {
		if x > t*(1+1e-9) && len(s.rows) < maxRows && !s.active[r] {
			s.rows, s.active[r], added = append(s.rows, int32(r)), true, true
		}
	}
	if added {
		return t, true
	}
	if u := lp.MaxOf(mixed); u < sol.Upper {
		sol.Upper = u
		sol.Cuts, sol.Lam = sol.Cuts[:0], sol.Lam[:0]
		for k, l := range lam {
			if l > 0 {
				sol.Cuts, sol.Lam = append(sol.Cuts, s.cuts[k]), append(sol.Lam, l)
			}
		}
	}
	return t, false
}

// step adds the cuts of the next point, halfway between the best weights
// and the master's (whose value is t), and drops old plans beyond maxCuts.
func (s *Search) step(price Oracle, t float64) {
	wm := s.ms.Weights(s.nres)
	wq := make([]float64, s.nres)
	for r := range wq {
		wq[r] = 0.5*s.Sol.W[r] + 0.5*wm[r]
	}
	c := s.eval(price, wq)
	s.ms.AddCol(c.Loads)
	// Misprice: the smoothed point's plan does not cut off the master's
	// point, so ask the master's point itself.
	if dot(wm, c.Loads) >= t*(1-1e-12) {
		s.ms.AddCol(s.eval(price, wm).Loads)
	}
	if len(s.cuts) > maxCuts {
		s.cuts = s.pruneCuts()
		s.ms.SetRows(s.rows, s.loads())
	}
}

// Remap carries the master's basic plans and the best fractional plan's
// over to refined items, and drops the others: refined item b takes the
// column of its parent item parent[b] in each, so the plans and their
// loads are unchanged.
func (s *Search) Remap(parent []int32) {
	var keep []*Cut
	for _, id := range s.ms.Basis() {
		if id >= 0 {
			keep = append(keep, s.cuts[id])
		}
	}
	s.cuts = keep
	s.ms.SetRows(s.rows, s.loads())
	done := map[*Cut]bool{}
	for _, c := range append(slices.Clip(s.cuts), s.Sol.Cuts...) {
		if done[c] {
			continue
		}
		done[c] = true
		choice := make([]uint16, len(parent))
		for b, p := range parent {
			choice[b] = c.Choice[p]
		}
		c.Choice = choice
	}
}

// pruneCuts keeps the master's basic plans and the most recent ones, half
// of maxCuts in all.
func (s *Search) pruneCuts() []*Cut {
	keep := make([]bool, len(s.cuts))
	for _, id := range s.ms.Basis() {
		if id >= 0 && id < len(s.cuts) {
			keep[id] = true
		}
	}
	for k := len(s.cuts) - maxCuts/2; k < len(s.cuts); k++ {
		keep[k] = true
	}
	var out []*Cut
	for k, c := range s.cuts {
		if keep[k] {
			out = append(out, c)
		}
	}
	return out
}

// cmpDesc orders larger first (NaNs as equal to everything, as policy's).
func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func dot(a, b []float64) float64 {
	var s float64
	for i, x := range a {
		s += x * b[i]
	}
	return s
}
