package relax

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// tiny is a random problem of n samples with nopt options each on ns
// storage and nc compute nodes, every resource limited, each sample held
// by one or two storage nodes. With one rank per compute node, a sample's
// rank is its compute node.
func tiny(rng *rand.Rand, n, nopt, ns, nc int) *Problem {
	opts := make([][]Raw, n)
	for i := range opts {
		opts[i] = make([]Raw, nopt)
		for o := range opts[i] {
			opts[i][o] = Raw{1 + rng.Float64()*100, 1 + rng.Float64()*1e3, 1 + rng.Float64()*1e3}
		}
	}
	pb := &Problem{
		Resources: Resources{NS: ns, NC: nc},
		N:         n, Nopt: nopt,
		Options:      func(i int, buf []Raw) { copy(buf, opts[i]) },
		Layout:       Layout{Stride: 1, CutOpt: nopt},
		Node:         make([]int32, nc),
		Rank:         make([]int32, n),
		Set:          make([]int32, n),
		ExactBuckets: BucketExact,
	}
	for c := range nc {
		pb.Node[c] = int32(c)
	}
	for j := range ns {
		pb.Sets = append(pb.Sets, []int16{int16(j)})
		if j+1 < ns {
			pb.Sets = append(pb.Sets, []int16{int16(j + 1), int16(j)})
		}
	}
	for i := range n {
		pb.Rank[i] = int32(rng.IntN(nc))
		pb.Set[i] = int32(rng.IntN(len(pb.Sets)))
	}
	pb.Canon = CanonSets(pb.Sets)
	r := &pb.Resources
	id := func() int32 { r.NRes++; return int32(r.NRes - 1) }
	per := func() float64 { return 1e-3 * (0.5 + rng.Float64()) }
	for range ns {
		r.SEgr, r.SEgrs = append(r.SEgr, id()), append(r.SEgrs, per())
	}
	for range ns * nc {
		r.Link, r.Links = append(r.Link, -1), append(r.Links, 0)
	}
	r.Up = -1
	for range nc {
		r.CIng, r.CIngs = append(r.CIng, -1), append(r.CIngs, 0)
	}
	for range ns {
		r.SCPU, r.SCPUs = append(r.SCPU, id()), append(r.SCPUs, per()*1e-2)
	}
	for range nc {
		r.CCPU, r.CCPUs = append(r.CCPU, id()), append(r.CCPUs, per()*1e-2)
	}
	return pb
}

// epoch is the largest load of the plan that serves sample i from storage
// node rep[i] with option opt[i].
func (pb *Problem) epoch(rep []int16, opt []uint8) float64 {
	pt := make([]Totals, pb.NS*pb.NC)
	buf := make([]Raw, pb.Nopt)
	for i := range pb.N {
		pb.Options(i, buf)
		q := buf[opt[i]]
		t := &pt[int(rep[i])*pb.NC+int(pb.node(i))]
		t.B, t.S, t.P, t.N = t.B+q[0], t.S+q[1], t.P+q[2], t.N+1
	}
	l := make([]float64, pb.NRes)
	pb.Loads(pt, l)
	return slices.Max(l)
}

// bruteForce is the least epoch over every plan.
func (pb *Problem) bruteForce() float64 {
	rep, opt := make([]int16, pb.N), make([]uint8, pb.N)
	best := math.Inf(1)
	var rec func(i int)
	rec = func(i int) {
		if i == pb.N {
			best = min(best, pb.epoch(rep, opt))
			return
		}
		for _, j := range pb.Sets[pb.Set[i]] {
			for o := range pb.Nopt {
				rep[i], opt[i] = j, uint8(o)
				rec(i + 1)
			}
		}
	}
	rec(0)
	return best
}

// TestWeakDuality: on tiny problems, the exact Lagrangian at the weights
// Solve finds (bucketed cutting planes, and the single-node search where
// it applies) never exceeds the best plan's epoch, and the plan the
// Lagrangian picks at those weights is a plan, whose epoch is at least the
// dual value.
func TestWeakDuality(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	plains := 0
	for trial := range 40 {
		ns, nc := 1+rng.IntN(2), 1+rng.IntN(2)
		pb := tiny(rng, 2+rng.IntN(5), 1+rng.IntN(3), ns, nc)
		bf := pb.bruteForce()
		for _, strict := range []bool{false, true} {
			bk, sol := pb.Solve(strict, 1e-6)
			if _, plain := pb.PlainDims(strict); plain != (bk == nil) {
				t.Fatalf("trial %d strict %v: buckets %v, plain search %v", trial, strict, bk != nil, plain)
			} else if plain {
				plains++
			}
			if sol.W == nil {
				t.Fatalf("trial %d strict %v: no weights", trial, strict)
			}
			if s := math.Abs(sum(sol.W) - 1); s > 1e-9 {
				t.Errorf("trial %d strict %v: weights %v sum to 1%+g", trial, strict, sol.W, s)
			}
			pr := pb.PricesAt(sol.W)
			rep, opt := make([]int16, pb.N), make([]uint8, pb.N)
			pt := make([]Totals, pb.NS*pb.NC)
			g := pb.Lagrangian(&pr, rep, opt, pt)
			if g2 := pb.Lagrangian(&pr, nil, nil, nil); g2 != g {
				t.Errorf("trial %d strict %v: Lagrangian %v with the plan, %v without", trial, strict, g, g2)
			}
			if g > bf*(1+1e-9) {
				t.Errorf("trial %d strict %v: dual value %v above the best plan's epoch %v", trial, strict, g, bf)
			}
			if e := pb.epoch(rep, opt); e < g*(1-1e-9) {
				t.Errorf("trial %d strict %v: the Lagrangian's plan's epoch %v below its value %v", trial, strict, e, g)
			}
			if sol.Upper < g*(1-1e-6) {
				t.Errorf("trial %d strict %v: upper bound %v below the dual value %v", trial, strict, sol.Upper, g)
			}
		}
	}
	if plains == 0 || plains == 80 {
		t.Errorf("the single-node search ran %d times of 80", plains)
	}
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// TestBucketQuantiles: past ExactBuckets, Bucket makes fewer buckets than
// samples, puts every sample in one, and only mixes samples of the same
// compute node and replica set members; SolveLP then refines them and its
// exact dual value is still at most the one bucket per sample search's
// upper bound.
func TestBucketQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	pb := tiny(rng, 3000, 3, 2, 2)
	pb.ExactBuckets = 100
	bk := pb.Bucket()
	if bk.N >= pb.N || bk.N == 0 {
		t.Fatalf("%d buckets for %d samples", bk.N, pb.N)
	}
	var members int32
	for b := range bk.N {
		members += bk.Count[b]
	}
	if int(members) != pb.N {
		t.Fatalf("buckets hold %d samples, want %d", members, pb.N)
	}
	for i := range pb.N {
		b := bk.Of[i]
		if bk.Node[b] != pb.node(i) || bk.Set[b] != pb.Canon[pb.Set[i]] {
			t.Fatalf("sample %d (node %d, set %d) in bucket %d (node %d, set %d)", i, pb.node(i), pb.Canon[pb.Set[i]], b, bk.Node[b], bk.Set[b])
		}
	}
	fine, sol := pb.SolveLP(bk)
	if fine.N < bk.N {
		t.Errorf("refined to %d buckets from %d", fine.N, bk.N)
	}
	w, g := sol.BestExact(pb.exact(sol.W))
	pb.ExactBuckets = pb.N
	_, lp := pb.SolveLP(pb.Bucket())
	if g > lp.Upper*(1+1e-6) || w == nil {
		t.Errorf("bucketed bound %v (weights %v) above the LP's upper bound %v", g, w, lp.Upper)
	}
	t.Logf("%d buckets, %d refined: bound %.6g, LP in [%.6g, %.6g]", bk.N, fine.N, g, lp.Lower, lp.Upper)
}

// exact is the exact Lagrangian at w.
func (pb *Problem) exact(w []float64) float64 {
	pr := pb.PricesAt(w)
	return pb.Lagrangian(&pr, nil, nil, nil)
}

// TestCanonSets: sets with the same members map to the first of them.
func TestCanonSets(t *testing.T) {
	got := CanonSets([][]int16{{0, 1}, {2}, {1, 0}, {2}, {1, 2}})
	if want := []int32{0, 1, 0, 1, 4}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
