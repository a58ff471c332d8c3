package policy

import (
	"math"
	"slices"

	"github.com/sophon-dl/sophon/policy/internal/bucket"
	"github.com/sophon-dl/sophon/policy/internal/dual"
)

// BoundResult is a bound (Bound) and how it was obtained. A one-node
// instance's bound is searched without buckets (Buckets is Samples) and,
// with a cache, is the cache bound alone (BucketLP is Seconds, no
// Binding).
type BoundResult struct {
	// Seconds is the lower bound on the predicted epoch time of every
	// cluster plan (every replica and split per sample, fractional or
	// not): max(the slowest node's GPU time, g(w)), g the Lagrangian dual
	// of the per-sample LP relaxation evaluated exactly, over every
	// sample, at the weights w of Binding.
	Seconds float64
	// BucketLP is the epoch of the best fractional plan found for the
	// bucketed LP (every sample of a bucket taking the same mix), an upper
	// estimate of the LP relaxation's optimum: the LP's optimum lies in
	// [Seconds, BucketLP] (GPU aside), so BucketLP/Seconds - 1 bounds what
	// bucketing and the search's tolerance cost the bound.
	BucketLP float64
	// Buckets is the number of buckets (after refinement); Samples the
	// number of samples.
	Buckets, Samples int
	// Iterations is the number of cutting-plane iterations, both runs.
	Iterations int
	// Binding lists the resources with a positive weight in w, heaviest
	// first: the ones the LP says bound the epoch.
	Binding []BindingResource
	// CacheSeconds is, on a one-node instance with a cache, the bound on
	// every plan whatever its residency (Seconds, or Resident's bound at a
	// fixed residency at least it); zero otherwise.
	CacheSeconds float64
}

// BindingResource is a resource and its weight in the bound's dual.
type BindingResource struct {
	// Resource is the resource.
	Resource ClusterResource
	// Weight is its weight in w (the weights sum to 1): the share of a
	// marginal epoch second the LP attributes to it.
	Weight float64
}

// Bucketing and the cutting-plane search.
const (
	// bucketExact: profiles of at most this many samples get one bucket
	// per sample, so the bucketed LP is the LP.
	bucketExact = 16384
	// bucketTarget is about how many buckets quantile bucketing makes
	// before refinement: each of the two features gets L levels, L*L
	// buckets per (compute node, replica set) pair present (times the
	// option families), L = sqrt(bucketTarget/pairs), 2 to maxLevels.
	bucketTarget, maxLevels = 49152, 64
	// quantileSample is how many samples, evenly spaced, set the levels.
	quantileSample = 8192
	// lpTol is the relative gap between the bucketed LP's lower and upper
	// bounds at which the search stops with one bucket per sample,
	// lpTolBucketed with quantile buckets (where bucketing costs the bound
	// far more); dual.Iters caps its iterations.
	lpTol, lpTolBucketed = 1e-7, 1e-4
	// plainIters caps the single-node planner's search (solvePlain).
	plainIters = 200
)

// buckets are bucket.Buckets of samples that share a compute node, a
// replica set (its members, in the order of the first set with them:
// bk.Set indexes Placement.Sets) and the options they have, and fall in
// the same quantiles of size and of cut shrink (or best-split shrink);
// refined buckets also share their cheapest column at given prices.
type buckets = bucket.Buckets

// features are what bucketing classifies a sample by; sig says which
// option families it has (bit 0 compression, bit 1 the cut).
func (m *model) features(buf []raw) (size, shrink, cutr float64, sig int) {
	size = max(buf[0][0], 1)
	shrink = math.Inf(1)
	for o := m.stride; o < m.cutOpt; o++ {
		if b := buf[o][0]; b < shrink {
			shrink = b
		}
	}
	shrink /= size
	if m.stride == 2 && !math.IsInf(buf[1][0], 1) {
		sig |= 1
	}
	if m.cut && !math.IsInf(buf[m.cutOpt][0], 1) {
		sig |= 2
		cutr = buf[m.cutOpt][0] / size
	}
	return size, shrink, cutr, sig
}

// quantiles returns the levels per feature and the quantile cut points of
// the two features bucket classifies by, from evenly spaced samples. The
// second feature is the cut's shrink where the profile has cuts, else the
// best split's; each gets as many levels as keep the buckets near
// bucketTarget. buf is scratch of nopt options.
func (cm *cmodel) quantiles(buf []raw) (lv int, szc, shc []float64) {
	m, p, pl := cm.m, cm.m.p, cm.pl
	n := len(p.Samples)
	step := max(1, n/quantileSample)
	var sz, sh []float64
	pairs := map[int64]bool{}
	for i := 0; i < n; i += step {
		m.options(&p.Samples[i], buf)
		size, shrink, cutr, sig := m.features(buf)
		sz = append(sz, size)
		if m.cut {
			if sig&2 != 0 {
				sh = append(sh, cutr)
			}
		} else {
			sh = append(sh, shrink)
		}
		pairs[int64(cm.node[pl.Rank[i]])<<32|int64(cm.canon[pl.Set[i]])] = true
	}
	lv = int(math.Sqrt(float64(bucketTarget) / float64(len(pairs))))
	lv = min(max(lv, 2), maxLevels)
	return lv, bucket.Levels(sz, lv), bucket.Levels(sh, lv)
}

// bucket classifies every sample and sums its options per bucket.
func (cm *cmodel) bucket() *buckets {
	m, p, pl := cm.m, cm.m.p, cm.pl
	n := len(p.Samples)
	buf := make([]raw, m.nopt())
	bk := bucket.New(m.nopt(), n, 0)
	newBucket := func(i int) int32 { return bk.Add(cm.node[pl.Rank[i]], cm.canon[pl.Set[i]]) }
	if n <= cm.exactBuckets {
		for i := range p.Samples {
			m.options(&p.Samples[i], buf)
			bk.Put(i, newBucket(i), buf)
		}
		bk.Prune()
		return bk
	}
	lv, szc, shc := cm.quantiles(buf)
	classes := 4 * lv * lv
	index := bucket.NewIndex(cm.nc * len(pl.Sets) * classes)
	for i := range p.Samples {
		m.options(&p.Samples[i], buf)
		size, shrink, cutr, sig := m.features(buf)
		second := shrink
		if m.cut {
			second = cutr
		}
		class := (sig*lv+bucket.Level(size, szc))*lv + bucket.Level(second, shc)
		key := (int(cm.node[pl.Rank[i]])*len(pl.Sets)+int(cm.canon[pl.Set[i]]))*classes + class
		b, ok := index.Get(key)
		if !ok {
			b = newBucket(i)
			index.Put(key, b)
		}
		bk.Put(i, b, buf)
	}
	bk.Prune()
	return bk
}

// prices are a weight vector's prices per unit: seconds of weighted load
// per byte on each (storage, compute) pair, per storage ns on each storage
// node and per compute ns on each compute node.
type prices struct {
	alpha []float64 // ns*nc
	beta  []float64 // ns
	gamma []float64 // nc
}

// pricesAt returns w's prices; a nil w weighs every resource 1 (the
// unweighted seconds, which break ties).
func (cm *cmodel) pricesAt(w []float64) prices {
	wt := func(id int32) float64 {
		switch {
		case id < 0:
			return 0
		case w == nil:
			return 1
		}
		return w[id]
	}
	pr := prices{make([]float64, cm.ns*cm.nc), make([]float64, cm.ns), make([]float64, cm.nc)}
	for j := range cm.ns {
		pr.beta[j] = wt(cm.sCPU[j]) * cm.sCPUs[j]
		for c := range cm.nc {
			pi := j*cm.nc + c
			pr.alpha[pi] = wt(cm.sEgr[j])*cm.sEgrs[j] + wt(cm.link[pi])*cm.links[pi] + wt(cm.up)*cm.ups + wt(cm.cIng[c])*cm.cIngs[c]
		}
	}
	for c := range cm.nc {
		pr.gamma[c] = wt(cm.cCPU[c]) * cm.cCPUs[c]
	}
	return pr
}

// priceBuckets is the bucketed Lagrangian at the prices pr: every bucket
// takes its cheapest column (exact ties go to the smaller unweighted
// seconds, then the first); it returns the dual value and the plan: each
// bucket's column (replica position * nopt + option), and its loads.
func (cm *cmodel) priceBuckets(bk *buckets, pr, unit *prices) (float64, *dual.Cut) {
	nopt, nc := bk.Nopt, cm.nc
	cut := &dual.Cut{Loads: make([]float64, cm.nres), Choice: make([]uint16, bk.N)}
	pt := make([]ptot, cm.ns*nc)
	var g float64
	for b := range bk.N {
		c := int(bk.Node[b])
		set := cm.pl.Sets[bk.Set[b]]
		best, bestU, bc, bj, bq := math.Inf(1), math.Inf(1), 0, 0, raw{}
		gc, gu := pr.gamma[c], unit.gamma[c]
		from, to := bk.OptAt[b], bk.OptAt[b+1]
		opts, tots := bk.Opts[from:to], bk.OptTot[from:to]
		for jj, j := range set {
			a, be := pr.alpha[int(j)*nc+c], pr.beta[j]
			au, bu := unit.alpha[int(j)*nc+c], unit.beta[j]
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
		t.b += q[0]
		t.s += q[1]
		t.p += q[2]
		t.n += float64(bk.Count[b])
	}
	cm.loads(pt, cut.Loads)
	return g, cut
}

// lpSolution is the bound's dual search's solution: dual.Solution's
// weights, bounds and (for the bucketed LP) fractional plan, whose cuts'
// Choice give each bucket's column (replica position * nopt + option).
type lpSolution struct {
	dual.Solution
	// exactW, when set, are weights whose exact Lagrangian value exactG
	// is known (the coarse buckets' best, before refinement).
	exactW []float64
	exactG float64
}

// solveLP maximises the bucketed Lagrangian dual over the weights simplex
// (dual.Search, the buckets priced by priceBuckets). With quantile
// buckets, it then refines them once (refine) and goes on from where it
// was: it returns the buckets the solution is for.
func (cm *cmodel) solveLP(bk *buckets) (*buckets, *lpSolution) {
	unit := cm.pricesAt(nil)
	if cm.nres == 0 {
		pr := cm.pricesAt(make([]float64, 0))
		_, cut := cm.priceBuckets(bk, &pr, &unit)
		return bk, &lpSolution{Solution: dual.Solution{Cuts: []*dual.Cut{cut}, Lam: []float64{1}}}
	}
	price := func(bk *buckets) dual.Oracle {
		return func(w []float64) (float64, *dual.Cut) {
			pr := cm.pricesAt(w)
			return cm.priceBuckets(bk, &pr, &unit)
		}
	}
	s := dual.NewSearch(cm.nres)
	if bk.N == len(cm.m.p.Samples) {
		s.Run(price(bk), lpTol)
		return bk, &lpSolution{Solution: s.Sol}
	}
	s.Run(price(bk), lpTolBucketed)
	w := s.Sol.W
	fine, parent, g := cm.refine(bk, w)
	s.Remap(parent)
	s.Run(price(fine), lpTolBucketed)
	// The exact Lagrangian at the coarse buckets' weights came with the
	// refinement; keep those weights if the refined search's best are
	// worse for it (the bound evaluates the weights exactly again).
	return fine, &lpSolution{Solution: s.Sol, exactW: w, exactG: g}
}

// solve is the bound's dual search: solveLP on the model's buckets, or,
// for the single-node planner (plainDims), solvePlain, without buckets
// (nil).
func (cm *cmodel) solve() (*buckets, *lpSolution) {
	if dims, ok := cm.plainDims(); ok {
		return nil, cm.solvePlain(dims)
	}
	return cm.solveLP(cm.bucket())
}

// plainDims returns, where the search is the single-node planner's
// (strict rules, one storage and one compute node whose resources are at
// most its egress, the link, and the two CPUs), those three resources'
// ids (-1: unlimited), the dimensions of its weights, a point of the
// 2-simplex.
func (cm *cmodel) plainDims() ([3]int32, bool) {
	if !cm.pass.strict || cm.ns != 1 || cm.nc != 1 {
		return [3]int32{}, false
	}
	dims := [3]int32{cm.sEgr[0], cm.sCPU[0], cm.cCPU[0]}
	n := 0
	for _, id := range dims {
		if id >= 0 {
			n++
		}
	}
	return dims, n > 0 && n == cm.nres
}

// solvePlain is the single-node planner's search, on which its plans
// depend to the last bit: dual.Simplex3 in the three dimensions dims (an
// unlimited resource's weight prices nothing), every sample priced on its
// own (lagrangian), until the model's maximum and the best dual value meet
// within the rules' lpTol, or plainIters iterations. It keeps no
// fractional plan.
func (cm *cmodel) solvePlain(dims [3]int32) *lpSolution {
	n := len(cm.m.p.Samples)
	rep, opt := make([]int16, n), make([]uint8, n)
	pt := make([]ptot, cm.ns*cm.nc)
	l := make([]float64, cm.nres)
	r := dual.Simplex3(func(w3 [3]float64) (float64, [3]float64) {
		pr := cm.pricesAt(cm.weights3(dims, w3))
		g := cm.lagrangian(&pr, rep, opt, pt)
		cm.loads(pt, l)
		return g, loads3(dims, l)
	}, cm.pass.lpTol, plainIters)
	sol := &lpSolution{Solution: dual.Solution{Lower: r.Lower, Upper: r.Upper, Iters: r.Iters}}
	if r.Found {
		sol.W = cm.weights3(dims, r.W)
	}
	return sol
}

// loads3 is the loads l of the model's resources on plainDims' three
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

// weights3 is the model's weights of the point w3 of plainDims' simplex.
func (cm *cmodel) weights3(dims [3]int32, w3 [3]float64) []float64 {
	w := make([]float64, cm.nres)
	for d, id := range dims {
		if id >= 0 {
			w[id] = w3[d]
		}
	}
	return w
}

// refine splits every bucket by the column (replica and option) its
// members find cheapest at the weights w. The refined buckets' Lagrangian
// at w is then the exact one, and the search goes on from there: a bucket
// whose members disagree at the LP's prices is where bucketing cost the
// bound, and it is split exactly there. It returns the refined buckets,
// each one's parent and the exact Lagrangian dual value at w.
func (cm *cmodel) refine(bk *buckets, w []float64) (*buckets, []int32, float64) {
	m, p, pl := cm.m, cm.m.p, cm.pl
	nopt, nc := bk.Nopt, cm.nc
	pr, unit := cm.pricesAt(w), cm.pricesAt(nil)
	buf := make([]raw, nopt)
	fine := bucket.New(nopt, len(p.Samples), 2*len(bk.OptAt)*nopt)
	var parent []int32
	var g float64
	index := map[uint64]int32{}
	for i := range p.Samples {
		m.options(&p.Samples[i], buf)
		b := bk.Of[i]
		c := int(bk.Node[b])
		best, bestU, bc := math.Inf(1), math.Inf(1), 0
		for jj, j := range pl.Sets[bk.Set[b]] {
			a, be, gc := pr.alpha[int(j)*nc+c], pr.beta[j], pr.gamma[c]
			au, bu, gu := unit.alpha[int(j)*nc+c], unit.beta[j], unit.gamma[c]
			for o, q := range buf {
				if math.IsInf(q[0], 1) {
					continue
				}
				v := a*q[0] + be*q[1] + gc*q[2]
				if v > best {
					continue
				}
				if u := au*q[0] + bu*q[1] + gu*q[2]; v < best || u < bestU {
					best, bestU, bc = v, u, jj*nopt+o
				}
			}
		}
		g += best
		key := uint64(b)<<16 | uint64(bc)
		f, ok := index[key]
		if !ok {
			f = fine.Add(bk.Node[b], bk.Set[b])
			index[key] = f
			parent = append(parent, b)
		}
		fine.Put(i, f, buf)
	}
	fine.Prune()
	return fine, parent, g
}

// cmpDesc orders larger first.
func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// lagrangian is the exact Lagrangian dual value at prices pr: every sample
// at its cheapest (replica, option). It is a lower bound on the LP
// relaxation of the per-sample problem, whatever the weights. Where pt is
// non-nil, rep and opt receive those columns (exact ties go to the
// smaller unweighted seconds, then the first) and pt their pair totals.
func (cm *cmodel) lagrangian(pr *prices, rep []int16, opt []uint8, pt []ptot) float64 {
	m, p, pl, nc := cm.m, cm.m.p, cm.pl, cm.nc
	buf := make([]raw, m.nopt())
	unit := cm.pricesAt(nil)
	clear(pt)
	var g float64
	for i := range p.Samples {
		m.options(&p.Samples[i], buf)
		c := int(cm.node[pl.Rank[i]])
		best, bestU, bj, bo := math.Inf(1), math.Inf(1), int16(0), 0
		for _, j := range pl.Sets[pl.Set[i]] {
			a, be, gc := pr.alpha[int(j)*nc+c], pr.beta[j], pr.gamma[c]
			for o, q := range buf {
				v := a*q[0] + be*q[1] + gc*q[2]
				if v > best || pt == nil && v == best {
					continue
				}
				u := unit.alpha[int(j)*nc+c]*q[0] + unit.beta[j]*q[1] + unit.gamma[c]*q[2]
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
			t.b += q[0]
			t.s += q[1]
			t.p += q[2]
			t.n++
		}
	}
	return g
}

// boundResult assembles the result from the LP and the exact dual value
// g at sol.W.
func (cm *cmodel) boundResult(bk *buckets, sol *lpSolution, g float64) BoundResult {
	w, g := sol.bestExact(g)
	res := BoundResult{
		Seconds:    max(g, cm.gpuMax),
		BucketLP:   max(sol.Upper, cm.gpuMax),
		Buckets:    len(cm.m.p.Samples),
		Samples:    len(cm.m.p.Samples),
		Iterations: sol.Iters,
	}
	if bk != nil {
		res.Buckets = bk.N
	}
	if cm.nres == 0 {
		res.BucketLP = res.Seconds
	}
	for r, x := range w {
		if x > 1e-9 {
			res.Binding = append(res.Binding, BindingResource{cm.res[r], x})
		}
	}
	slices.SortStableFunc(res.Binding, func(a, b BindingResource) int { return cmpDesc(a.Weight, b.Weight) })
	return res
}

// Bound is a lower bound on the predicted epoch time of every plan of
// in: every choice of replica and split (compressed or not,
// SplitCut where the profile has the cut's measurements) per sample, and
// every fractional mix of them. See BoundResult and docs/policy.md.
//
// The relaxation: each sample i takes a convex combination x_i of its
// columns (replica j in its set, option o); each resource's load is linear
// in the x; the LP minimises T subject to every load <= T. For weights w on
// the simplex over the resources, the Lagrangian g(w) = sum_i min over
// (j, o) of the w-weighted seconds of that column is at most the LP's
// optimum (weak duality), whatever w is. Bound returns
// max(slowest GPU time, g(w)) with g computed exactly, sample by sample,
// so it is a lower bound on every plan's predicted epoch.
//
// Bucketing only chooses w. Samples are grouped into buckets (same compute
// node, same replica set members, same option families, same quantile of
// raw size and of cut shrink, or of best-split shrink where the profile has
// no cuts; one bucket per sample for profiles of up to 16,384 samples),
// each bucket's options summed over its members, and w is the dual optimum
// of the bucketed LP, in which every member of a bucket takes the same mix.
// The per-bucket sums are exact loads for such plans, so the bucketed LP
// is the LP restricted to bucket-uniform mixes: its optimum is at least
// the LP's, and it is not itself a lower bound (its Lagrangian
// overestimates g, since a sum of minima is at most the minimum of the
// sums). Hence the bound is g at the bucketed LP's weights, re-evaluated
// exactly: it can fall short of the LP (BucketLP - Seconds bounds by how
// much) but never exceed it. To narrow that gap, the search is run twice:
// after the first, every bucket is split by the column its members find
// cheapest at the first weights (so that the bucketed Lagrangian is exact
// there), and the search goes on from the plans it had; the bound is the
// better of g at the two weights. With one bucket per sample the search
// runs once and the bound equals the LP's optimum within lpTol (1e-7
// relative), unless it stops at its 400 iterations.
//
// On a one-node instance the search is the single-node planner's
// (solvePlain), and with in.CacheBytes the bound counts the cache:
// resident samples, at most CacheBytes of them at the cache split,
// included, the capacity dualised with a price per cached byte chosen per
// weights as the fractional knapsack's (cacheBound, docs/policy.md). A
// cluster's bound ignores in.CacheBytes, as its policies do.
//
// It fails when the cluster, the placement or the profile is invalid.
func Bound(in Instance) (BoundResult, error) {
	cm, err := in.model(true)
	if err != nil {
		return BoundResult{}, err
	}
	if n := len(in.Profile.Samples); in.one && in.CacheBytes > 0 {
		b, _ := cm.cacheBound(CacheSplit(in.Profile), in.CacheBytes)
		return BoundResult{Seconds: b, BucketLP: b, Buckets: n, Samples: n, CacheSeconds: b}, nil
	}
	return cm.bound(), nil
}

func (cm *cmodel) bound() BoundResult {
	bk, sol := cm.solve()
	var g float64
	if sol.W != nil {
		pr := cm.pricesAt(sol.W)
		g = cm.lagrangian(&pr, nil, nil, nil)
	}
	return cm.boundResult(bk, sol, g)
}

// bestExact returns the better of g, the exact Lagrangian value at sol.W,
// and the one refinement computed, with its weights.
func (sol *lpSolution) bestExact(g float64) ([]float64, float64) {
	if sol.exactW != nil && sol.exactG > g {
		return sol.exactW, sol.exactG
	}
	return sol.W, g
}
