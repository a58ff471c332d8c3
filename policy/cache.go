package policy

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/sophon-dl/sophon/policy/cacheplan"
	"github.com/sophon-dl/sophon/policy/internal/relax"
	"github.com/sophon-dl/sophon/profiler"
)

// The compute node's cache (Resources.CacheBytes, Plan.Cached) in the
// single-node model: a resident sample is kept at the pipeline's cache
// split k (cacheplan.SplitOf: the file for a random pipeline, the finished
// output for a deterministic one), takes its size there of the budget,
// and costs no payload, no storage CPU and cacheplan.FinishNS compute ns
// per steady-state epoch; the first epoch fetches it at k. Residency is
// fixed across epochs. Only one-node instances choose a residency
// (withCache); Resident keeps a given one on any instance.

// NameLRU names the LRU baseline.
const NameLRU = "lru"

// CacheSplit is profile p's cache split (cacheplan.SplitOf its op names).
func CacheSplit(p *profiler.Profile) int { return cacheplan.SplitOf(p.Ops) }

// cacheDual is the single-node Lagrangian with the cache at weights w: each
// sample at its cheapest fetched option, then the residency knapsack
// (cacheplan.Knapsack) of what staying resident at split k saves at w,
// under budget bytes. It returns the dual value, the loads of that
// (fractional in at most one sample) plan, and each sample's saving and
// entry bytes. The capacity's price is the knapsack's last saving per
// byte, at which its plan meets the budget exactly, so the value is the
// weighted sum of its loads: a cut as dual.Simplex3 needs.
func (cm *cmodel) cacheDual(w []float64, k int, budget float64) (float64, relax.Totals, []float64, []float64) {
	m, p := cm.m, cm.m.p
	pr := cm.PricesAt(w)
	a, be, ga := pr.Alpha[0], pr.Beta[0], pr.Gamma[0]
	n := len(p.Samples)
	buf, best := make([]raw, m.nopt()), make([]raw, n)
	cost, save, entry := make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range p.Samples {
		s := &p.Samples[i]
		m.options(s, buf)
		cost[i] = math.Inf(1)
		for _, q := range buf {
			if v := a*q[0] + be*q[1] + ga*q[2]; v < cost[i] {
				cost[i], best[i] = v, q
			}
		}
		entry[i] = cacheplan.Entry(s, k)
		save[i] = cost[i] - ga*(cacheplan.FinishNS(s, k)+m.perSample)
	}
	var g float64
	var t relax.Totals
	for i, f := range cacheplan.Knapsack(save, entry, budget) {
		q := best[i]
		g += cost[i] - f*save[i]
		t.B += (1 - f) * q[0]
		t.S += (1 - f) * q[1]
		t.P += (1-f)*q[2] + f*(cacheplan.FinishNS(&p.Samples[i], k)+m.perSample)
		t.N++
	}
	return g, t, save, entry
}

// cacheBound is the single-node bound with the cache: relax's Simplex3
// over cacheDual, as the single-node planner's search runs without it,
// and the weights found (nil when no resource but the GPU is limited).
func (cm *cmodel) cacheBound(k int, budget float64) (float64, []float64) {
	dims, ok := cm.PlainDims(cm.pass.strict)
	if !ok {
		return cm.gpuMax, nil
	}
	r, w := cm.Simplex3(dims, func(w, l []float64) float64 {
		g, t, _, _ := cm.cacheDual(w, k, budget)
		cm.Loads([]relax.Totals{t}, l)
		return g
	}, cm.pass.lpTol)
	if w == nil {
		return cm.gpuMax, nil
	}
	return max(r.Lower, cm.gpuMax), w
}

// withCache is plan (a policy run without a cache) with residency chosen
// jointly under in.CacheBytes, on a one-node instance (any other is
// planned without a cache): for each of a few weight vectors (the cache
// bound's, then each limited resource alone) the samples that save the
// most priced seconds per cached byte are made resident
// (cacheplan.Whole; at the bound's weights also the knapsack's other
// roundings, cacheplan.Alternatives), plan re-solves every split with them
// resident (on cacheplan.Rewrite's profile), and the plan predicting the
// shortest epoch is kept (ties to fewer link bytes), the plan without a
// cache among them. A resident entry's Split is the cache split, what the
// first epoch fetches.
func (in Instance) withCache(plan func(Instance) (Plan, error)) (Plan, error) {
	budget := in.CacheBytes
	in.CacheBytes = 0
	best, err := plan(in)
	if err != nil || !in.one || budget <= 0 || in.Profile.N() == 0 {
		return best, err
	}
	p, k := in.Profile, CacheSplit(in.Profile)
	cm, err := in.model(true)
	if err != nil {
		return Plan{}, err
	}
	_, wb := cm.cacheBound(k, budget)
	ws := [][]float64{wb}
	for id := range cm.NRes {
		ws = append(ws, make([]float64, cm.NRes))
		ws[len(ws)-1][id] = 1
	}
	var tried [][]bool
	for _, w := range ws {
		if w == nil {
			continue
		}
		_, _, save, entry := cm.cacheDual(w, k, budget)
		sets := [][]bool{cacheplan.Whole(save, entry, budget)}
		if len(tried) == 0 {
			sets = append(sets, cacheplan.Alternatives(save, entry, budget)...)
		}
		for _, cached := range sets {
			if slices.ContainsFunc(tried, func(c []bool) bool { return slices.Equal(c, cached) }) {
				continue
			}
			tried = append(tried, cached)
			q := in.with(cacheplan.Rewrite(p, cached, k))
			pl, err := plan(q)
			if err == nil {
				pl, err = q.keep(pl, cached, k)
			}
			if err != nil {
				return Plan{}, err
			}
			if pl.Pred.Seconds < best.Pred.Seconds || pl.Pred.Seconds == best.Pred.Seconds && pl.Pred.Bytes < best.Pred.Bytes {
				best = pl
			}
		}
	}
	return best, nil
}

// keep is pl, a plan of q (whose profile is cacheplan.Rewrite's for
// cached), with the samples where cached[i] resident at the cache split k:
// moved to split 0 (only there is their link free; Pred re-made, the
// steady-state epoch's), then marked Cached at k.
func (q Instance) keep(pl Plan, cached []bool, k int) (Plan, error) {
	pl.Split, pl.Compress = slices.Clone(pl.Split), slices.Clone(pl.Compress)
	moved := false
	for i, c := range cached {
		if c && pl.Split[i] != 0 {
			pl.Split[i], moved = 0, true
		}
	}
	if moved {
		cp, err := Predict(q, pl.Replica, pl.Split, pl.Compress)
		if err != nil {
			return Plan{}, err
		}
		pl.Pred, pl.Cluster = cp.Totals(), &cp
		pl = q.finish(pl)
	}
	pl.MarkResident(cached, k)
	return pl, nil
}

// MarkResident makes the samples where cached[i] resident in pl: Cached,
// at the cache split k (what the first epoch fetches), uncompressed.
func (pl *Plan) MarkResident(cached []bool, k int) {
	pl.Cached = cached
	for i, c := range cached {
		if c {
			pl.Split[i] = k
			if pl.Compress != nil {
				pl.Compress[i] = false
			}
		}
	}
}

// ErrResidency is Resident's error for residency flags that do not match
// the profile's samples.
var ErrResidency = errors.New("policy: residency does not fit the profile")

// Resident is Solve with the residency fixed, on one node or a cluster:
// the samples where cached[i] resident at the cache split, every other
// split (and replica) re-solved around them, as a compute agent re-plans
// between epochs without moving its cache's contents. The bound's Seconds
// is that of every plan keeping exactly that residency (an epoch's own
// bound), CacheSeconds the one that may move it (one node with
// CacheBytes). The caller answers for the residency's size. With cached
// nil it is Solve.
func Resident(name string, in Instance, cached []bool) (Plan, BoundResult, error) {
	if cached == nil {
		return Solve(name, in)
	}
	if e, ok := Lookup(name); !ok || !e.plans(in) {
		return Plan{}, BoundResult{}, in.unknown(name)
	}
	if len(cached) != len(in.Profile.Samples) {
		return Plan{}, BoundResult{}, fmt.Errorf("%w: %d residency flags for %d samples", ErrResidency, len(cached), len(in.Profile.Samples))
	}
	var cb float64
	if in.one && in.CacheBytes > 0 {
		b, err := Bound(in)
		if err != nil {
			return Plan{}, BoundResult{}, err
		}
		cb = b.Seconds
	}
	cached, k := slices.Clone(cached), CacheSplit(in.Profile)
	q := in.with(cacheplan.Rewrite(in.Profile, cached, k))
	pl, b, err := Solve(name, q)
	if err == nil {
		pl, err = q.keep(pl, cached, k)
	}
	if err != nil {
		return Plan{}, BoundResult{}, err
	}
	b.CacheSeconds = cb
	return pl, b, nil
}

// FirstEpoch is the plan of the epoch that fills the cache, the first of
// plan pl (one of in's). A random pipeline's entries are the files
// themselves (cache split 0), so its resident samples are fetched raw, and
// every other sample's split is re-solved around them by pl's policy (on
// cacheplan.Pin's profile); a deterministic pipeline's entries are
// finished outputs, which the compute node makes from whatever split a
// sample arrives at, so its first epoch is pl's policy without a cache.
// It is pl's own splits where those predict no worse, and where nothing
// is resident (lru's first epoch is its cold cache's). Its Pred is the
// first epoch's; its Cached is pl's.
func FirstEpoch(in Instance, pl Plan) (Plan, error) {
	in.CacheBytes = 0
	best := pl
	cp, err := Predict(in, pl.Replica, pl.Split, pl.Compress)
	if err != nil {
		return Plan{}, err
	}
	best.Pred = cp.Totals()
	if !in.one {
		best.Cluster = &cp
	}
	e, ok := Lookup(pl.Policy)
	if pl.Cached == nil || !ok || !e.plans(in) {
		return best, nil
	}
	k, q := CacheSplit(in.Profile), in
	if k == 0 {
		q = in.with(cacheplan.Pin(in.Profile, pl.Cached, 0))
	}
	if f, err := e.Plan(q); err == nil && f.Pred.Seconds < best.Pred.Seconds {
		for i, c := range pl.Cached {
			if c && k == 0 && f.Split[i] != 0 {
				return best, nil // only where the link is free
			}
		}
		f.Cached = pl.Cached
		best = f
	}
	return best, nil
}

// LRU is the baseline a local file cache gives, on one node only: NoOff's
// splits, and an LRU cache of in.CacheBytes at the cache split, which a random order every
// epoch turns into a random subset: each sample is a hit with
// probability cacheplan.LRUHitRatio of the budget and the entries
// (well under the budget's share of the bytes). Its Pred is the expected steady-state epoch (a hit costs what a
// resident sample does); its Cached is nil, since no residency is
// planned.
func LRU(in Instance) (Plan, error) {
	pl, err := in.runOne(NameLRU, (*cmodel).noOff)
	if err != nil {
		return Plan{}, err
	}
	pl.Policy = NameLRU
	p, k := in.Profile, CacheSplit(in.Profile)
	var finish float64
	entries := make([]float64, len(p.Samples))
	for i := range p.Samples {
		entries[i] = cacheplan.Entry(&p.Samples[i], k)
		finish += cacheplan.FinishNS(&p.Samples[i], k) + max(in.Cluster.ComputeNSPerSample, 0)
	}
	h := cacheplan.LRUHitRatio(in.CacheBytes, entries, cacheplan.LRULag)
	pr := &pl.Pred
	pr.Bytes, pr.LinkSeconds = pr.Bytes*(1-h), pr.LinkSeconds*(1-h)
	pr.StorageCPUSeconds, pr.StorageSeconds = pr.StorageCPUSeconds*(1-h), pr.StorageSeconds*(1-h)
	pr.ComputeCPUSeconds = pr.ComputeCPUSeconds*(1-h) + h*finish*1e-9
	if cores := in.Cluster.Compute[0].Cores; cores > 0 {
		pr.ComputeSeconds = pr.ComputeCPUSeconds / cores
	}
	pr.Seconds, pr.Bottleneck = -1, ""
	for _, t := range []struct {
		s    float64
		name string
	}{{pr.LinkSeconds, Link}, {pr.StorageSeconds, StorageCPU}, {pr.ComputeSeconds, ComputeCPU}, {pr.GPUSeconds, GPU}} {
		if t.s > pr.Seconds {
			pr.Seconds, pr.Bottleneck = t.s, t.name
		}
	}
	return pl, nil
}
