package policy

import (
	"slices"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/profiler"
)

// Policy names, as reported in Plan.Policy.
const (
	NameNoOff     = "nooff"
	NameAllOff    = "alloff"
	NameResizeOff = "resizeoff"
	NameFastFlow  = "fastflow"
	NameSOPHON    = "sophon"
	NameOptimal   = "optimal"
)

// The single-node policies below are the cluster planner on SingleNode(r):
// one storage node, one compute node of one rank, every sample on both.
// Their plans carry no Replica and no Cluster breakdown, as a single-node
// plan never did. Like the cluster planner they take profiles of at most
// MaxClusterOps ops (ByName checks).

// singleModel is the planner model of r: the cluster SingleNode(r) with
// every sample on its one rank and held by its one storage node. Nothing
// is validated, as the single-node policies cannot fail: a zero or
// negative figure is unlimited.
func singleModel(p *profiler.Profile, r Resources, cut bool) *cmodel {
	c := SingleNode(r)
	n := len(p.Samples)
	pl := &Placement{Rank: make([]int32, n), Sets: [][]int16{{0}}, Set: make([]int32, n)}
	cm := indexModel(p, &c, pl, cut)
	cm.pass = singlePass
	return cm
}

// singlePlan is a plan of singleModel as a single-node plan.
func singlePlan(pl Plan) Plan {
	pl.Replica, pl.Cluster = nil, nil
	return pl
}

// uniform is the plan of a single-node model that splits every sample at
// k in [0, n], uncompressed (never SplitCut).
func (cm *cmodel) uniform(name string, k int) Plan {
	n := len(cm.m.p.Samples)
	rep, opt := make([]int16, n), make([]uint8, n)
	o := uint8(cm.m.option(min(max(k, 0), cm.m.n), false))
	for i := range opt {
		opt[i] = o
	}
	return cm.plan(name, rep, opt)
}

// NoOff runs the whole pipeline on the compute node: every sample crosses
// the link raw.
func NoOff(p *profiler.Profile, r Resources) Plan {
	return singlePlan(singleModel(p, r, false).noOff())
}

// AllOff runs the whole pipeline on storage.
func AllOff(p *profiler.Profile, r Resources) Plan {
	cm := singleModel(p, r, false)
	return singlePlan(cm.uniform(NameAllOff, cm.m.n))
}

// ResizeOff runs ops [0:k] on storage for every sample; k is normally
// CropSplit(p).
func ResizeOff(p *profiler.Profile, r Resources, k int) Plan {
	return singlePlan(singleModel(p, r, false).uniform(NameResizeOff, k))
}

// CropSplit is profile p's crop split, ResizeOff's: the one the profile
// records (profiler.Profile.CropSplit, from the pipeline itself), else,
// for a profile that predates the field, ops.CropSplitOf its op names; -1
// when there is none.
func CropSplit(p *profiler.Profile) int {
	if p.CropSplit > 0 {
		return p.CropSplit
	}
	if k, ok := ops.CropSplitOf(p.Ops); ok {
		return k
	}
	return -1
}

// FastFlow makes one decision for the whole dataset at op granularity, as
// FastFlow offloads whole stages: the uniform split with the smallest
// predicted epoch time (ties go to the smaller split). Its splits are the
// ops' boundaries 0..n; it never uses SplitCut.
func FastFlow(p *profiler.Profile, r Resources) Plan {
	return singlePlan(singleModel(p, r, false).fastFlow())
}

// fastFlow is FastFlow on a single-node model.
func (cm *cmodel) fastFlow() Plan {
	m := cm.m
	// The one pair's totals per uniform split, in one pass over the
	// samples.
	tot := make([]ptot, m.n+1)
	buf := make([]raw, m.nopt())
	for i := range m.p.Samples {
		m.options(&m.p.Samples[i], buf)
		for k := range tot {
			q := buf[m.option(k, false)]
			tot[k].b += q[0]
			tot[k].s += q[1]
			tot[k].p += q[2]
			tot[k].n++
		}
	}
	L := make([]float64, cm.nres)
	epoch := func(k int) float64 {
		cm.loads(tot[k:k+1], L)
		return cm.epoch(L)
	}
	best := 0
	for k := 1; k <= m.n; k++ {
		if epoch(k) < epoch(best) {
			best = k
		}
	}
	return cm.uniform(NameFastFlow, best)
}

// SOPHON is the paper's greedy. Per sample it considers only the split
// with the smallest output (the smallest such split on ties); its
// offloading efficiency is the bytes saved (the raw payload, Bytes[0],
// less the bytes at that split) over the storage CPU time of ops [0:k].
// Samples are taken in decreasing efficiency (ties by position) while the
// predicted link time exceeds the predicted storage CPU time, recomputed
// after each pick, and the efficiency is positive. It ignores compute CPU,
// the GPU and compression, as the paper does, and never uses SplitCut,
// which the paper does not have, so that comparisons with it stay fair.
// It is ClusterSOPHON on SingleNode(r).
//
// NB: one guard beyond the paper: the pick that makes storage CPU time
// reach link time is undone when it raises max(link, storage) above what it
// was before the pick, so that SOPHON never predicts worse than NoOff (one
// expensive sample can otherwise overshoot on small profiles).
//
// With r.CacheBytes, residency is chosen jointly with the splits
// (withCache).
func SOPHON(p *profiler.Profile, r Resources) Plan {
	return withCache(p, r, func(p *profiler.Profile, r Resources) Plan {
		return singlePlan(singleModel(p, r, false).sophon())
	})
}

// Optimal minimises the predicted epoch time over per-sample splits and
// per-sample compression, using every split point (SplitCut included,
// where the profile has the cut's measurements) and all four resources.
// It is ClusterOptimal on SingleNode(r), compared with every single-node
// baseline (NoOff, AllOff, FastFlow, SOPHON, ResizeOff where the pipeline
// has a crop op) rather than the cluster's, so it never predicts worse
// than any of them. With r.CacheBytes, residency is chosen jointly with
// the splits (withCache).
func Optimal(p *profiler.Profile, r Resources) Plan { return withCache(p, r, optimal) }

func optimal(p *profiler.Profile, r Resources) Plan {
	cm := singleModel(p, r, true)
	bases := []Plan{cm.noOff(), cm.uniform(NameAllOff, cm.m.n), cm.fastFlow(), cm.sophon()}
	if k := CropSplit(p); k >= 0 {
		bases = append(bases, cm.uniform(NameResizeOff, k))
	}
	pl, _ := cm.optimal(bases...)
	return singlePlan(pl)
}

// Bound is a lower bound on every policy's predicted epoch time: the
// optimum of the LP relaxation of the planning problem (every sample a
// convex combination of its options, SplitCut included where the profile
// has the cut's measurements), as ClusterBound computes it on
// SingleNode(r).
func Bound(p *profiler.Profile, r Resources) float64 {
	return singleModel(p, r, true).bound().Seconds
}

// Predict returns the predicted epoch of running sample i with split[i]
// (clamped to [0, n], except SplitCut) and, where compress is non-nil and
// the sample has compression data, compressed when compress[i]. A sample
// at SplitCut is predicted at the cut where the profile has its cut
// measurements (compress[i] is then ignored) and as split 0 where it has
// not: a sample that cannot be cut crosses the link raw.
func Predict(p *profiler.Profile, r Resources, split []int, compress []bool) Prediction {
	cm := singleModel(p, r, slices.Contains(split, SplitCut))
	return cm.predictSplits(make([]int16, len(p.Samples)), split, compress).Totals()
}
