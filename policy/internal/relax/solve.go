package relax

import (
	"math"

	"github.com/sophon-dl/sophon/policy/internal/dual"
)

// The cutting-plane search.
const (
	// LPTol is the relative gap between the bucketed LP's lower and upper
	// bounds at which the search stops with one bucket per sample,
	// lpTolBucketed with quantile buckets (where bucketing costs the bound
	// far more); dual.Iters caps its iterations.
	LPTol, lpTolBucketed = 1e-7, 1e-4
	// plainIters caps the single-node planner's search (SolvePlain,
	// Simplex3).
	plainIters = 200
)

// Problem is the per-sample planning problem as the relaxation sees it:
// each sample's columns, a storage node of its replica set and one of its
// options, on the Resources.
type Problem struct {
	Resources
	// N is the number of samples; Nopt the number of options of each.
	N, Nopt int
	// Options fills buf (len Nopt) with sample i's raw option quantities;
	// an option the sample has no data for costs +Inf.
	Options func(i int, buf []Raw)
	// Layout is how the options are numbered, which bucketing reads.
	Layout Layout
	// Node holds each rank's compute node, Rank each sample's rank, Sets
	// the distinct replica sets (storage node indices), Set each sample's
	// (an index into Sets) and Canon each set's first set with the same
	// members (in any order), which buckets use: the order of a set
	// matters only to round-robin.
	Node, Rank, Set, Canon []int32
	Sets                   [][]int16
	// ExactBuckets is the largest N bucketed one sample a bucket
	// (BucketExact; tests change it).
	ExactBuckets int
}

// Solution is the dual search's solution: dual.Solution's weights, bounds
// and (for the bucketed LP) fractional plan, whose cuts' Choice give each
// bucket's column (replica position * Nopt + option).
type Solution struct {
	dual.Solution
	// exactW, when set, are weights whose exact Lagrangian value exactG
	// is known (the coarse buckets' best, before refinement).
	exactW []float64
	exactG float64
}

// BestExact returns the better of g, the exact Lagrangian value at sol.W,
// and the one refinement computed, with its weights.
func (sol *Solution) BestExact(g float64) ([]float64, float64) {
	if sol.exactW != nil && sol.exactG > g {
		return sol.exactW, sol.exactG
	}
	return sol.W, g
}

// priceBuckets is the bucketed Lagrangian at the prices pr: every bucket
// takes its cheapest column (exact ties go to the smaller unweighted
// seconds, then the first); it returns the dual value and the plan: each
// bucket's column (replica position * nopt + option), and its loads.
func (pb *Problem) priceBuckets(bk *Buckets, pr, unit *Prices) (float64, *dual.Cut) {
	nopt, nc := bk.Nopt, pb.NC
	cut := &dual.Cut{Loads: make([]float64, pb.NRes), Choice: make([]uint16, bk.N)}
	pt := make([]Totals, pb.NS*nc)
	var g float64
	for b := range bk.N {
		c := int(bk.Node[b])
		set := pb.Sets[bk.Set[b]]
		best, bestU, bc, bj, bq := math.Inf(1), math.Inf(1), 0, 0, Raw{}
		gc, gu := pr.Gamma[c], unit.Gamma[c]
		from, to := bk.OptAt[b], bk.OptAt[b+1]
		opts, tots := bk.Opts[from:to], bk.OptTot[from:to]
		for jj, j := range set {
			a, be := pr.Alpha[int(j)*nc+c], pr.Beta[j]
			au, bu := unit.Alpha[int(j)*nc+c], unit.Beta[j]
			for x, q := range tots {
				v := a*q[0] + be*q[1] + gc*q[2]
				if v > best {
					continue
				}
				u := au*q[0] + bu*q[1] + gu*q[2]
				if v < best || u < bestU {
					best, bestU, bc, bj, bq = v, u, jj*nopt+int(opts[x]), int(j), q
				}
			}
		}
		g += best
		cut.Choice[b] = uint16(bc)
		q := bq
		t := &pt[bj*nc+c]
		t.B += q[0]
		t.S += q[1]
		t.P += q[2]
		t.N += float64(bk.Count[b])
	}
	pb.Loads(pt, cut.Loads)
	return g, cut
}

// SolveLP maximises the bucketed Lagrangian dual over the weights simplex
// (dual.Search, the buckets priced by their cheapest columns). With
// quantile buckets, it then refines them once (refine) and goes on from
// where it was: it returns the buckets the solution is for.
func (pb *Problem) SolveLP(bk *Buckets) (*Buckets, *Solution) {
	unit := pb.PricesAt(nil)
	if pb.NRes == 0 {
		pr := pb.PricesAt(make([]float64, 0))
		_, cut := pb.priceBuckets(bk, &pr, &unit)
		return bk, &Solution{Solution: dual.Solution{Cuts: []*dual.Cut{cut}, Lam: []float64{1}}}
	}
	price := func(bk *Buckets) dual.Oracle {
		return func(w []float64) (float64, *dual.Cut) {
			pr := pb.PricesAt(w)
			return pb.priceBuckets(bk, &pr, &unit)
		}
	}
	s := dual.NewSearch(pb.NRes)
	if bk.N == pb.N {
		s.Run(price(bk), LPTol)
		return bk, &Solution{Solution: s.Sol}
	}
	s.Run(price(bk), lpTolBucketed)
	w := s.Sol.W
	fine, parent, g := pb.refine(bk, w)
	s.Remap(parent)
	s.Run(price(fine), lpTolBucketed)
	// The exact Lagrangian at the coarse buckets' weights came with the
	// refinement; keep those weights if the refined search's best are
	// worse for it (the bound evaluates the weights exactly again).
	return fine, &Solution{Solution: s.Sol, exactW: w, exactG: g}
}

// Solve is the bound's dual search: SolveLP on the problem's buckets, or,
// for the single-node planner (strict, where PlainDims holds), SolvePlain
// to the relative gap plainTol, without buckets (nil).
func (pb *Problem) Solve(strict bool, plainTol float64) (*Buckets, *Solution) {
	if dims, ok := pb.PlainDims(strict); ok {
		return nil, pb.solvePlain(dims, plainTol)
	}
	return pb.SolveLP(pb.Bucket())
}

// PlainDims returns, where the search is the single-node planner's
// (strict rules, one storage and one compute node whose resources are at
// most its egress, the link, and the two CPUs), those three resources'
// ids (-1: unlimited), the dimensions of its weights, a point of the
// 2-simplex.
func (pb *Problem) PlainDims(strict bool) ([3]int32, bool) {
	if !strict || pb.NS != 1 || pb.NC != 1 {
		return [3]int32{}, false
	}
	dims := [3]int32{pb.SEgr[0], pb.SCPU[0], pb.CCPU[0]}
	n := 0
	for _, id := range dims {
		if id >= 0 {
			n++
		}
	}
	return dims, n > 0 && n == pb.NRes
}

// solvePlain is the single-node planner's search, on which its plans
// depend to the last bit: Simplex3 with every sample priced on its own
// (Lagrangian). It keeps no fractional plan.
func (pb *Problem) solvePlain(dims [3]int32, tol float64) *Solution {
	rep, opt := make([]int16, pb.N), make([]uint8, pb.N)
	pt := make([]Totals, pb.NS*pb.NC)
	r, w := pb.Simplex3(dims, func(w, l []float64) float64 {
		pr := pb.PricesAt(w)
		g := pb.Lagrangian(&pr, rep, opt, pt)
		pb.Loads(pt, l)
		return g
	}, tol)
	return &Solution{Solution: dual.Solution{Lower: r.Lower, Upper: r.Upper, Iters: r.Iters, W: w}}
}

// Simplex3 is dual.Simplex3 in the three dimensions dims (PlainDims; an
// unlimited resource's weight prices nothing) until the model's maximum
// and the best dual value meet within tol, or plainIters iterations.
// value returns the dual value at the weights w (len NRes) and fills l
// (len NRes) with the loads of the plan that attains it. It returns the
// search's result and its best weights as the problem's (nil where none
// was found).
func (r *Resources) Simplex3(dims [3]int32, value func(w, l []float64) float64, tol float64) (dual.Result3, []float64) {
	l := make([]float64, r.NRes)
	res := dual.Simplex3(func(w3 [3]float64) (float64, [3]float64) {
		g := value(r.weights3(dims, w3), l)
		return g, loads3(dims, l)
	}, tol, plainIters)
	if !res.Found {
		return res, nil
	}
	return res, r.weights3(dims, res.W)
}

// loads3 is the loads l of the model's resources on PlainDims' three
// dimensions (0 where a dimension has no resource).
func loads3(dims [3]int32, l []float64) [3]float64 {
	var v [3]float64
	for d, id := range dims {
		if id >= 0 {
			v[d] = l[id]
		}
	}
	return v
}

// weights3 is the model's weights of the point w3 of PlainDims' simplex.
func (r *Resources) weights3(dims [3]int32, w3 [3]float64) []float64 {
	w := make([]float64, r.NRes)
	for d, id := range dims {
		if id >= 0 {
			w[id] = w3[d]
		}
	}
	return w
}

// Lagrangian is the exact Lagrangian dual value at prices pr: every sample
// at its cheapest (replica, option). It is a lower bound on the LP
// relaxation of the per-sample problem, whatever the weights. Where pt is
// non-nil, rep and opt receive those columns (exact ties go to the
// smaller unweighted seconds, then the first) and pt their pair totals.
func (pb *Problem) Lagrangian(pr *Prices, rep []int16, opt []uint8, pt []Totals) float64 {
	nc := pb.NC
	buf := make([]Raw, pb.Nopt)
	unit := pb.PricesAt(nil)
	clear(pt)
	var g float64
	for i := range pb.N {
		pb.Options(i, buf)
		c := int(pb.node(i))
		best, bestU, bj, bo := math.Inf(1), math.Inf(1), int16(0), 0
		for _, j := range pb.Sets[pb.Set[i]] {
			a, be, gc := pr.Alpha[int(j)*nc+c], pr.Beta[j], pr.Gamma[c]
			for o, q := range buf {
				v := a*q[0] + be*q[1] + gc*q[2]
				if v > best || pt == nil && v == best {
					continue
				}
				u := unit.Alpha[int(j)*nc+c]*q[0] + unit.Beta[j]*q[1] + unit.Gamma[c]*q[2]
				if v < best || u < bestU {
					best, bestU, bj, bo = v, u, j, o
				}
			}
		}
		g += best
		if pt != nil {
			rep[i], opt[i] = bj, uint8(bo)
			q := buf[bo]
			t := &pt[int(bj)*nc+c]
			t.B += q[0]
			t.S += q[1]
			t.P += q[2]
			t.N++
		}
	}
	return g
}
