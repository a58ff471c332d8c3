package policy

import (
	"slices"

	"github.com/sophon-dl/sophon/policy/internal/relax"
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

// solve is the bound's dual search (relax.Problem.Solve) under the
// model's rules.
func (cm *cmodel) solve() (*relax.Buckets, *relax.Solution) {
	return cm.Solve(cm.pass.strict, cm.pass.lpTol)
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

// boundResult assembles the result from the LP and the exact dual value
// g at sol.W.
func (cm *cmodel) boundResult(bk *relax.Buckets, sol *relax.Solution, g float64) BoundResult {
	w, g := sol.BestExact(g)
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
	if cm.NRes == 0 {
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
// runs once and the bound equals the LP's optimum within relax.LPTol
// (1e-7 relative), unless it stops at its 400 iterations. Package relax
// holds the relaxation and the search.
//
// On a one-node instance the search is the single-node planner's
// (relax.Problem.Solve with strict rules), and with in.CacheBytes the bound counts the cache:
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

// bound is Bound without a cache: the dual search's weights, and the
// exact Lagrangian at them.
func (cm *cmodel) bound() BoundResult {
	bk, sol := cm.solve()
	var g float64
	if sol.W != nil {
		pr := cm.PricesAt(sol.W)
		g = cm.Lagrangian(&pr, nil, nil, nil)
	}
	return cm.boundResult(bk, sol, g)
}
