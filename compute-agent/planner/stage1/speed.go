package stage1

import (
	"context"
	"math"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/sendcost"
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

// Budgeted is a Source that knows its storage agent's whole CPU budget
// (the compute agent's fetcher, engine.Fetcher.Budget), which the agent's
// workers split (storage-agent/budget.Size) whatever share of it this job
// plans for (Source.CPUs).
type Budgeted interface {
	Budget() float64
}

// budgetOf is f's agent's whole budget where f knows it (Budgeted), else
// f.CPUs(): what the agent's budget time (storage_budget_ns) is counted
// against. A job's share of the budget (Info's share_cpus) is not: two
// jobs sharing a 1-core agent each plan for 0.5 of it, while its one
// worker still runs at a whole core's share, and pricing its budget time
// at half a core read every offload at half its CPU (the storage side
// twice as fast as it is).
func budgetOf(f Source) float64 {
	if b, ok := f.(Budgeted); ok {
		if c := b.Budget(); c > 0 {
			return c
		}
	}
	return f.CPUs()
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
		ns, have := pr.epochNS(id)
		c, ok := cost(id, pr.k)
		if !have || !ok || c <= 0 {
			continue
		}
		local = append(local, c)
		remote = append(remote, ns)
	}
	speed, rse = speedEstimate(local, remote)
	return speed, rse, len(local)
}

// epochNS is sample id's storage CPU as an epoch spends it: its thread
// CPU times its contention where stage 1 measured its agent's transport
// with the link full, else its effective CPU (effectiveNS, which holds
// only the little transport the probe itself caused); ok false when the
// probe has no cost for it.
//
// In an epoch that keeps the agent's quota of q cores busy, with t of
// them sending, n offloads of thread CPU c each take T = n c / (q - t)
// seconds, and each one's budget time times its share is q T / n =
// c q / (q - t).
func (pr StorageProbe) epochNS(id uint64) (float64, bool) {
	ns, ok := pr.ns[id]
	if !ok || ns <= 0 {
		return 0, false
	}
	if c := pr.contention[id]; c >= 1 {
		return float64(ns) * c, true
	}
	return float64(max(pr.eff[id], ns)), true
}

// maxTransportShare bounds the share of an agent's cores contention
// leaves to its transport: an agent whose sending took more while the
// link probe ran was serving others too, or starved; its samples are then
// priced as if it took this much.
const maxTransportShare = 0.75

// contention is how much more of an agent's quota of cpus cores the ops
// of an offload take in an epoch than their thread CPU when the agent's
// transport takes transport cores beside them: the ops get what the
// transport leaves, cpus - transport, and an epoch spends cpus for each
// second of it, so the quota each op's second of CPU costs is
// cpus / (cpus - transport). The transport is what it took while the link
// probe filled the link, the epoch's rate when the link binds it. 0 when
// either is unknown.
func contention(cpus, transport float64) float64 {
	if !(cpus > 0) || !(transport > 0) {
		return 0
	}
	return cpus / (cpus - min(transport, maxTransportShare*cpus))
}

// processCPU is each storage agent's CPU by its Info; zero for one that
// does not answer within a second.
func processCPU(ctx context.Context, fs []Source) []sendcost.CPU {
	out := make([]sendcost.CPU, len(fs))
	for i, f := range fs {
		out[i], _ = sendcost.Read(ctx, f.Client(), time.Second)
	}
	return out
}

// transportCores is each agent's CPU, in cores, beyond the ops of this
// job's link probe (link, by agent) while it ran: sending, TLS and copies
// of a full link's raw bytes, from its CPU before (cpu0) and after (cpu1)
// by sendcost.Spent. 0 where unknown or the probe moved too few bytes
// (sendcost.MinBytes) to tell.
func transportCores(cpu0, cpu1 []sendcost.CPU, link []probeResult) []float64 {
	out := make([]float64, len(link))
	for i, r := range link {
		if i >= len(cpu0) || i >= len(cpu1) || r.elapsed <= 0 || r.bytes < sendcost.MinBytes {
			continue
		}
		var ops int64
		for _, ns := range r.storageNS {
			ops += ns
		}
		if spent, ok := sendcost.Spent(cpu0[i], cpu1[i], r.bytes, ops); ok {
			out[i] = spent / float64(r.elapsed.Nanoseconds())
		}
	}
	return out
}

// ProbeOf is a storage probe measured elsewhere (a saved run, a test):
// the samples in ids asked at split k, each one's thread CPU there (ns),
// its effective CPU (eff; effectiveNS) and its contention (nil: stage 1
// did not measure the transport).
func ProbeOf(k int, ids []uint64, ns, eff map[uint64]int64, contention map[uint64]float64) StorageProbe {
	return StorageProbe{ids: ids, k: k, ns: ns, eff: eff, contention: contention}
}
