package stage1

import (
	"math"

	"github.com/sophon-dl/sophon/profiler"
)

// speedEstimate is the storage CPU's speed relative to this node's from
// the same samples' costs here (local) and there (remote), paired by
// index: the ratio of their sums, the one that prices an epoch's sum of
// samples right, and that ratio's relative standard error (the delta
// method's for a ratio of means: a sample whose cost there strays from
// its cost here times the ratio widens it). Pairs with a cost that is not
// positive are skipped; speed is 0 without any, rse 0 with fewer than
// two.
func speedEstimate(local, remote []float64) (speed, rse float64) {
	var sx, sy float64
	var n int
	for i := range min(len(local), len(remote)) {
		if local[i] > 0 && remote[i] > 0 {
			sx, sy, n = sx+local[i], sy+remote[i], n+1
		}
	}
	if n == 0 {
		return 0, 0
	}
	speed = sx / sy
	if n < 2 {
		return speed, 0
	}
	var ss float64
	for i := range min(len(local), len(remote)) {
		if local[i] > 0 && remote[i] > 0 {
			d := local[i] - speed*remote[i]
			ss += d * d
		}
	}
	my := sy / float64(n)
	se := math.Sqrt(ss/float64(n-1)/float64(n)) / my
	return speed, se / speed
}

// medianSpeed is the median of the per-sample ratios local/remote
// (profiler.SpeedRatio), stage 1's speed before it took the ratio of sums;
// kept for the probe's log, beside the new estimate.
func medianSpeed(local, remote []float64) float64 {
	l, r := make([]int64, len(local)), make([]int64, len(remote))
	for i, v := range local {
		l[i] = int64(v)
	}
	for i, v := range remote {
		r[i] = int64(v)
	}
	return profiler.SpeedRatio(l, r)
}

// workerShare is a storage agent's budgeted workers for cpus cores and
// each one's share of a core (storage-agent/budget.Size): ceil(cpus)
// workers sharing cpus; one worker with a whole core when cpus is
// unknown (0).
func workerShare(cpus float64) (workers int, share float64) {
	if !(cpus > 0) {
		return 1, 1
	}
	workers = max(1, int(math.Ceil(cpus)))
	return workers, min(1, cpus/float64(workers))
}

// effectiveNS is a sample's storage CPU as an epoch spends it: the budget
// time its worker held (storage_budget_ns) times the worker's share of a
// core, which is its thread CPU (threadNS) when the agent got its whole
// budget and more when it did not: when the quota the agent's process
// shares with its transport and raw workers was spent (the cgroup
// throttled the worker), or the machine was busy. An agent that does not
// report budget time (budgetNS 0) gives threadNS. Never below threadNS.
func effectiveNS(threadNS, budgetNS int64, share float64) int64 {
	if budgetNS <= 0 || !(share > 0) {
		return threadNS
	}
	return max(threadNS, int64(math.Round(float64(budgetNS)*min(share, 1))))
}

// sum is the sum of xs.
func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// SpeedAgainst is the storage CPU's speed against a profile's clock: the
// ratio of the sums of cost(id, k), the profile's CPU for ops[0:k] of the
// probe's samples at the probe's split k (ok false: the profile lacks
// it), and the effective CPU (effectiveNS) the storage agents spent on
// them, with its relative standard error and how many samples it
// compared. A plan that divides the profile's op costs by this speed
// prices each offload at what an epoch spends of the storage agent's
// quota, whatever the clock the profile was recorded on (a busy
// profiling epoch) and whatever the quota's transport takes from the
// workers. speed is 0 when no sample compares.
func (pr StorageProbe) SpeedAgainst(cost func(id uint64, k int) (ns float64, ok bool)) (speed, rse float64, n int) {
	var local, remote []float64
	for _, id := range pr.ids {
		eff, have := pr.eff[id]
		c, ok := cost(id, pr.k)
		if !have || !ok || eff <= 0 || c <= 0 {
			continue
		}
		local = append(local, c)
		remote = append(remote, float64(max(eff, pr.ns[id])))
	}
	speed, rse = speedEstimate(local, remote)
	return speed, rse, len(local)
}

// ProbeOf is a storage probe measured elsewhere (a saved run, a test):
// the samples in ids asked at split k, each one's thread CPU there (ns)
// and its effective CPU (eff; effectiveNS).
func ProbeOf(k int, ids []uint64, ns, eff map[uint64]int64) StorageProbe {
	return StorageProbe{ids: ids, k: k, ns: ns, eff: eff}
}
