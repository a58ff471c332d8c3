package policy

import (
	"fmt"
	"math"
	"slices"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy/internal/relax"
	"github.com/sophon-dl/sophon/profiler"
)

// Policy names, as reported in Plan.Policy.
const (
	NameNoOff      = "nooff"
	NameAllOff     = "alloff"
	NameResizeOff  = "resizeoff"
	NameFastFlow   = "fastflow"
	NameRoundRobin = "roundrobin"
	NameSOPHON     = "sophon"
	NameOptimal    = "optimal"
)

// Instance is what every policy plans and every bound bounds: a profile's
// samples on a cluster, each placed on a rank and a replica set. A
// single-node plan is the plan of the one-node cluster OneNode makes; On
// makes any other.
type Instance struct {
	Profile   *profiler.Profile
	Cluster   Cluster
	Placement *Placement
	// CacheBytes is the compute node's cache budget (Resources.CacheBytes,
	// Plan.Cached); zero means no cache. On a one-node instance SOPHON and
	// Optimal choose the residency under it jointly with the splits
	// (withCache) and Bound counts it; a cluster's policies and bound do
	// not model the cache yet and ignore it, but Resident keeps a
	// residency (chosen on the pooled one-node instance) on a cluster too.
	CacheBytes float64
	// one marks OneNode's: figures unvalidated (zero or negative is
	// unlimited), plans without Replica and Cluster, the single-node rules
	// (singlePass) and baselines (alloff, resizeoff, fastflow).
	one bool
}

// OneNode is the one-node cluster of r (SingleNode(r)): one storage node,
// one compute node of one rank, every sample on both, and r's cache
// budget.
func OneNode(p *profiler.Profile, r Resources) Instance {
	var n int
	if p != nil {
		n = len(p.Samples)
	}
	pl := &Placement{Rank: make([]int32, n), Sets: [][]int16{{0}}, Set: make([]int32, n)}
	return Instance{Profile: p, Cluster: SingleNode(r), Placement: pl, CacheBytes: r.CacheBytes, one: true}
}

// On is the instance of p on cluster c under placement pl, no cache.
func On(p *profiler.Profile, c Cluster, pl *Placement) Instance {
	return Instance{Profile: p, Cluster: c, Placement: pl}
}

// with is in on profile q (same samples, same order) without a cache.
func (in Instance) with(q *profiler.Profile) Instance {
	in.Profile, in.CacheBytes = q, 0
	return in
}

// model validates in (a one-node instance's profile only) and indexes
// it. With cut, the model offers SplitCut where the profile has cut
// data.
func (in Instance) model(cut bool) (*cmodel, error) {
	if !in.one {
		return newCModel(in.Profile, &in.Cluster, in.Placement, cut)
	}
	if err := checkProfile(in.Profile); err != nil {
		return nil, err
	}
	cm := indexModel(in.Profile, &in.Cluster, in.Placement, cut)
	cm.pass = singlePass
	return cm, nil
}

// finish is a plan of in's model as in's plan: a one-node plan carries no
// Replica and no Cluster breakdown, as a single-node plan never did.
func (in Instance) finish(pl Plan) Plan {
	if in.one {
		pl.Replica, pl.Cluster = nil, nil
	}
	return pl
}

// run is f's plan of in, on a model with SplitCut where cut.
func (in Instance) run(cut bool, f func(*cmodel) Plan) (Plan, error) {
	cm, err := in.model(cut)
	if err != nil {
		return Plan{}, err
	}
	return in.finish(f(cm)), nil
}

// runOne is run for a policy of one-node instances only.
func (in Instance) runOne(name string, f func(*cmodel) Plan) (Plan, error) {
	if !in.one {
		// NB: not in.unknown, whose names come from the registry, which
		// holds this policy (an initialisation cycle).
		return Plan{}, fmt.Errorf("%w %q for a cluster: it plans one node only", ErrUnknownPolicy, name)
	}
	return in.run(false, f)
}

// unknown is ByName's error for a name without a form for in.
func (in Instance) unknown(name string) error {
	if in.one {
		return fmt.Errorf("%w %q (one of %v)", ErrUnknownPolicy, name, Names)
	}
	return fmt.Errorf("%w %q for a cluster (one of %v)", ErrUnknownPolicy, name, ClusterNames)
}

// uniform splits every sample of a one-node model at k in [0, n].
func (cm *cmodel) uniform(name string, k int) Plan {
	n := len(cm.m.p.Samples)
	rep, opt := make([]int16, n), make([]uint8, n)
	o := uint8(cm.m.option(min(max(k, 0), cm.m.n), false))
	for i := range opt {
		opt[i] = o
	}
	return cm.plan(name, rep, opt)
}

// NoOff sends every sample raw (split 0), each from the replica that is
// least loaded when its turn comes: samples are taken in order and each
// goes to the member of its replica set whose egress time, with the
// sample added, is smallest (ties to the fewest bytes so far, then to the
// first in the set). On one node it runs the whole pipeline on the
// compute node.
func NoOff(in Instance) (Plan, error) { return in.run(false, (*cmodel).noOff) }

// AllOff runs the whole pipeline on storage (one node only).
func AllOff(in Instance) (Plan, error) {
	return in.runOne(NameAllOff, func(cm *cmodel) Plan { return cm.uniform(NameAllOff, cm.m.n) })
}

// ResizeOff runs ops [0:k] on storage for every sample, k the profile's
// crop split (CropSplit); one node only. It fails with ErrNoCropOp where
// the profile has no crop op.
func ResizeOff(in Instance) (Plan, error) {
	if in.one && CropSplit(in.Profile) < 0 {
		return Plan{}, fmt.Errorf("%w: %s", ErrNoCropOp, in.Profile.Pipeline)
	}
	return in.runOne(NameResizeOff, func(cm *cmodel) Plan { return cm.uniform(NameResizeOff, CropSplit(cm.m.p)) })
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
// predicted epoch time (ties go to the smaller split); one node only. Its
// splits are the ops' boundaries 0..n; it never uses SplitCut.
func FastFlow(in Instance) (Plan, error) { return in.runOne(NameFastFlow, (*cmodel).fastFlow) }

// fastFlow is FastFlow on a one-node model.
func (cm *cmodel) fastFlow() Plan {
	m := cm.m
	tot := make([]relax.Totals, m.n+1)
	buf := make([]raw, m.nopt())
	for i := range m.p.Samples {
		m.options(&m.p.Samples[i], buf)
		for k := range tot {
			q := buf[m.option(k, false)]
			tot[k].B += q[0]
			tot[k].S += q[1]
			tot[k].P += q[2]
			tot[k].N++
		}
	}
	L := make([]float64, cm.NRes)
	epoch := func(k int) float64 {
		cm.Loads(tot[k:k+1], L)
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

// RoundRobin sends every sample raw from its replicas in turn, ignoring
// every rate: the k-th sample (in profile order) with a given replica set
// goes to the set's (k mod size)-th member. It is the baseline a
// rate-blind client gives.
func RoundRobin(in Instance) (Plan, error) { return in.run(false, (*cmodel).roundRobin) }

// SOPHON is the paper's greedy, on every storage agent. First each sample
// gets a replica in proportion to the replicas' egress rates (see
// rateReplicas; on one node, the node). Then each agent runs the greedy
// on its own samples, with its egress as the link and its cores as the
// storage CPU: per sample it considers only the split with the smallest
// output (the smallest such split on ties); its offloading efficiency is
// the bytes saved (the raw payload, Bytes[0], less the bytes at that
// split) over the storage CPU time of ops [0:k]. Samples are taken in
// decreasing efficiency (ties by position) while the agent's predicted
// egress time exceeds its predicted storage CPU time, recomputed after
// each pick, and the efficiency is positive. An agent with unlimited
// egress offloads nothing. It ignores compute CPU, the GPU and
// compression, as the paper does, and never uses SplitCut, which the
// paper does not have, so that comparisons with it stay fair.
//
// NB: one guard beyond the paper: the pick that makes storage CPU time
// reach link time is undone when it raises max(link, storage) above what it
// was before the pick, so that SOPHON never predicts worse than NoOff (one
// expensive sample can otherwise overshoot on small profiles).
//
// On a one-node instance with CacheBytes, residency is chosen jointly with
// the splits (withCache).
func SOPHON(in Instance) (Plan, error) {
	return in.withCache(func(in Instance) (Plan, error) { return in.run(false, (*cmodel).sophon) })
}

// Optimal minimises the predicted epoch time over a replica and a split
// (compressed or not, SplitCut where the profile has the cut's
// measurements) per sample, with every resource. The result is compared
// with the baselines' plans (on one node NoOff, AllOff, FastFlow, SOPHON
// and ResizeOff where the pipeline has a crop op; on a cluster NoOff,
// RoundRobin and SOPHON) and the best one kept, so it never predicts
// worse than they do. On a one-node instance with CacheBytes, residency
// is chosen jointly with the splits (withCache).
//
// Method: the bucketed LP of Bound gives dual prices and a fractional
// plan (a mix of whole plans, so per bucket a few replica and option
// columns); each sample in turn takes the column of its bucket's mix that
// leaves the resources it loads least filled relative to the fractional
// plan's loads, so that every resource fills in step towards them; a
// local pass then repeatedly sets a target between the epoch and the
// bound and moves samples off the resources above it, those with the
// cheapest priced cost per second removed first, never loading another
// resource past the target (one node: the single-node rules, singlePass).
// Tiny instances (at most 65,536 joint assignments) are solved
// exhaustively. The cost is a few passes over the samples plus the LP on
// the buckets (docs/policy.md gives the figures at 1.28 M samples).
func Optimal(in Instance) (Plan, error) {
	return in.withCache(func(in Instance) (Plan, error) {
		pl, _, err := optimal(in)
		return pl, err
	})
}

// optimal is Optimal's plan of in without a cache, and the bound it
// computes on the way.
func optimal(in Instance) (Plan, BoundResult, error) {
	cm, err := in.model(true)
	if err != nil {
		return Plan{}, BoundResult{}, err
	}
	pl, b := cm.optimal(cm.bases(in)...)
	return in.finish(pl), b, nil
}

// bases is the baselines' plans Optimal compares with on cm.
func (cm *cmodel) bases(in Instance) []Plan {
	if !in.one {
		return []Plan{cm.noOff(), cm.roundRobin(), cm.sophon()}
	}
	bases := []Plan{cm.noOff(), cm.uniform(NameAllOff, cm.m.n), cm.fastFlow(), cm.sophon()}
	if k := CropSplit(in.Profile); k >= 0 {
		bases = append(bases, cm.uniform(NameResizeOff, k))
	}
	return bases
}

// Solve is the named policy's plan of in and Bound's, computed once where
// the policy computes it on the way (optimal on a cluster).
func Solve(name string, in Instance) (Plan, BoundResult, error) {
	if name == NameOptimal && !in.one {
		return optimal(in)
	}
	pl, err := ByName(name, in)
	if err != nil {
		return Plan{}, BoundResult{}, err
	}
	b, err := Bound(in)
	return pl, b, err
}

// All returns every policy's plan of in, in the registry's order (on one
// node nooff, alloff, resizeoff when CropSplit finds a crop op, fastflow,
// sophon, optimal, and lru with a cache; on a cluster ClusterNames), and
// the bound (Bound; on a cluster the one optimal computes).
func All(in Instance) ([]Plan, BoundResult, error) {
	if !in.one {
		cm, err := in.model(true)
		if err != nil {
			return nil, BoundResult{}, err
		}
		bases := cm.bases(in)
		opt, b := cm.optimal(bases...)
		return append(bases, opt), b, nil
	}
	var plans []Plan
	for _, e := range Registry {
		if !e.Single || e.Name == NameResizeOff && CropSplit(in.Profile) < 0 || e.Name == NameLRU && in.CacheBytes <= 0 {
			continue
		}
		pl, err := e.Plan(in)
		if err != nil {
			return nil, BoundResult{}, err
		}
		plans = append(plans, pl)
	}
	b, err := Bound(in)
	return plans, b, err
}

// Histogram counts a plan's samples per split: index 0 is SplitCut, index
// k+1 split k, for k in [0, n]; splits outside those count nowhere.
func (pl *Plan) Histogram(n int) []int {
	h := make([]int, n+2)
	for _, k := range pl.Split {
		if k >= SplitCut && k <= n {
			h[k+1]++
		}
	}
	return h
}

func (cm *cmodel) noOff() Plan {
	p, pl := cm.m.p, cm.pl
	rep, opt := make([]int16, len(p.Samples)), make([]uint8, len(p.Samples))
	bytes := make([]float64, cm.NS)
	for i := range p.Samples {
		b := float64(p.Samples[i].Bytes[0])
		best, bt, bb := int16(0), math.Inf(1), math.Inf(1)
		for _, j := range pl.Sets[pl.Set[i]] {
			nb := bytes[j] + b
			if t := nb * cm.SEgrs[j]; t < bt || (t == bt && nb < bb) {
				best, bt, bb = j, t, nb
			}
		}
		rep[i] = best
		bytes[best] += b
	}
	return cm.plan(NameNoOff, rep, opt)
}

func (cm *cmodel) roundRobin() Plan {
	pl := cm.pl
	n := len(cm.m.p.Samples)
	rep, opt := make([]int16, n), make([]uint8, n)
	turn := make([]int, len(pl.Sets))
	for i := range n {
		set := pl.Sets[pl.Set[i]]
		rep[i] = set[turn[pl.Set[i]]%len(set)]
		turn[pl.Set[i]]++
	}
	return cm.plan(NameRoundRobin, rep, opt)
}

// rateReplicas gives each sample a replica in proportion to the replicas'
// egress rates: within each replica set, the k-th sample goes to the
// member furthest below its share (rate over the set's total rate) of the
// set's first k samples; where any storage node's egress is unlimited,
// every node weighs the same.
func (cm *cmodel) rateReplicas() []int16 {
	pl, c := cm.pl, cm.c
	n := len(cm.m.p.Samples)
	rep := make([]int16, n)
	wt := make([]float64, cm.NS)
	for j, s := range c.Storage {
		wt[j] = s.EgressBytesPerSec
	}
	if slices.Contains(wt, 0) {
		for j := range wt {
			wt[j] = 1
		}
	}
	off := make([]int, len(pl.Sets)+1)
	for k, set := range pl.Sets {
		off[k+1] = off[k] + len(set)
	}
	assigned := make([]float64, off[len(pl.Sets)])
	seen := make([]float64, len(pl.Sets))
	for i := range n {
		k := pl.Set[i]
		set := pl.Sets[k]
		var sum float64
		for _, j := range set {
			sum += wt[j]
		}
		seen[k]++
		best, bd := 0, math.Inf(-1)
		for jj, j := range set {
			if d := wt[j]/sum*seen[k] - assigned[off[k]+jj]; d > bd {
				best, bd = jj, d
			}
		}
		assigned[off[k]+best]++
		rep[i] = set[best]
	}
	return rep
}

func (cm *cmodel) sophon() Plan {
	m, p := cm.m, cm.m.p
	n := len(p.Samples)
	rep, opt := cm.rateReplicas(), make([]uint8, n)
	// Per agent: SOPHON's candidates and greedy.
	type cand struct {
		eff   float64
		i     int32
		j     int16
		k     int8
		saved float64
		sns   float64
	}
	cands := make([]cand, 0, n)
	// Per agent: the raw payload it sends, and the storage ns sending it
	// costs.
	bytes, send := make([]float64, cm.NS), make([]float64, cm.NS)
	for i := range p.Samples {
		s := &p.Samples[i]
		bytes[rep[i]] += float64(s.Bytes[0])
		send[rep[i]] += float64(s.Bytes[0]) * m.perByte
		k := 0
		for j := 1; j <= m.n; j++ {
			if s.Bytes[j] < s.Bytes[k] {
				k = j
			}
		}
		if k == 0 {
			continue
		}
		sns := float64(s.PrefixNS(k))
		saved := float64(s.Bytes[0] - s.Bytes[k])
		eff := math.Inf(1)
		if sns > 0 {
			eff = saved / sns
		}
		cands = append(cands, cand{eff, int32(i), rep[i], int8(k), saved, sns})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.j != b.j {
			return int(a.j) - int(b.j)
		}
		if a.eff != b.eff {
			return cmpDesc(a.eff, b.eff)
		}
		return int(a.i - b.i)
	})
	var sns float64
	for x, cd := range cands {
		j := cd.j
		if x == 0 || cands[x-1].j != j {
			sns = send[j] // the next agent: sending its raw bytes
		}
		link := func(b float64) float64 { return b * cm.SEgrs[j] }
		stor := func(s float64) float64 { return s * cm.SCPUs[j] }
		if bytes[j] < 0 || link(bytes[j]) <= stor(sns) || !(cd.eff > 0) {
			bytes[j] = -1 // this agent is done
			continue
		}
		nb, ns := bytes[j]-cd.saved, sns+cd.sns-cd.saved*m.perByte
		if link(nb) <= stor(ns) && max(link(nb), stor(ns)) > max(link(bytes[j]), stor(sns)) {
			bytes[j] = -1 // the guard: this overshooting pick does not pay
			continue
		}
		bytes[j], sns = nb, ns
		opt[cd.i] = uint8(m.option(int(cd.k), false))
	}
	return cm.plan(NameSOPHON, rep, opt)
}
