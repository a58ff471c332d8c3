package budget

import (
	"math"
	"sync"
	"time"
)

// Work-conserving offload.
//
// A plan offloads exactly as much work as the storage CPU it was made for
// can do while the link is busy. When that CPU shrinks (a noisy neighbour,
// a hog in the same cgroup), offloaded requests queue behind each other
// while the link runs out of other work and idles: the epoch becomes
// storage-bound and can end up slower than offloading nothing. A request
// with FetchRequest.fallback set is therefore admitted to the budgeted
// queue only while the budget can finish it before the link runs out of
// other work; otherwise it is answered raw, by the raw workers, and the
// compute agent runs every op. The bytes the model sees are the same
// either way.
//
// At admission the controller compares
//
//	finish = slowdown x (backlog + cost) / workers
//
// with the request's horizon (FetchRequest.horizon_ns: the compute agent's
// estimate of how long the link stays busy with what its epoch has left).
// backlog is the estimated CPU of the offloads admitted and not yet
// finished, cost the request's own (FetchRequest.cost_ns, else a running
// mean of finished offloads); slowdown is a running mean, over finished
// offloads, of the worker time each held out of the budget (Time, which
// grows when the workers get less CPU than their share) over its
// estimated cost. An offload whose finish lies past its horizon would leave
// the link idle, so it is answered raw.
//
// Which requests keep their offload near that boundary is the plan's
// ranking: each carries its efficiency (FetchRequest.priority: bytes saved
// per storage CPU-ms), and a request's horizon is scaled by 0.5 + 0.5q,
// where q is the share of the last priorityMemory requests' priorities
// below its own. The least efficient offloads are answered raw first, at
// half their horizon; the most efficient run up to theirs.
//
// A raw answer is not free either: it puts the file's bytes beyond the
// offload's on the link (FetchRequest.raw_extra_ns, that many ns of link
// time). It only shortens the epoch when the link would otherwise wait on
// the offload for longer than that, so the limit is the scaled horizon
// plus the request's extra link time: near an epoch's end, where the
// horizon has run down, a large file's offload runs unless its CPU is
// further behind than sending the file would take.

const (
	// defaultOffloadCost is an offload's estimated CPU before any has
	// finished and when requests carry no estimate.
	defaultOffloadCost = 10 * time.Millisecond
	// meanWeight is the weight of a new observation in the running means.
	meanWeight = 1.0 / 16
	// priorityMemory is how many recent priorities rank a request's.
	priorityMemory = 256
)

// Conserver is the admission controller of work-conserving offload. Its
// methods are safe for concurrent use.
type Conserver struct {
	workers int
	maxCost time.Duration // a request's cost estimate is clamped to this

	mu       sync.Mutex
	backlog  float64 // estimated ns of admitted, unfinished offloads
	cost     float64 // running mean of an offload's cost, ns
	slowdown float64 // running mean of budget time / estimated cost
	prios    []uint32
	next     int // ring index into prios
}

// NewConserver returns the controller of a budget of workers workers; a
// request's own cost estimate is clamped to maxCost.
func NewConserver(workers int, maxCost time.Duration) *Conserver {
	return &Conserver{workers: max(workers, 1), maxCost: maxCost, cost: float64(defaultOffloadCost), slowdown: 1}
}

// estimate is the CPU a request is expected to cost: its own estimate,
// clamped, or the running mean.
func (c *Conserver) estimate(costNS uint64) float64 {
	if costNS == 0 {
		return c.cost
	}
	return min(float64(costNS), float64(c.maxCost))
}

// rankLocked is the share of the remembered priorities below p, and
// remembers p.
func (c *Conserver) rankLocked(p uint32) float64 {
	below := 0
	for _, q := range c.prios {
		if q < p {
			below++
		}
	}
	q := 0.0
	if len(c.prios) > 0 {
		q = float64(below) / float64(len(c.prios))
	}
	if len(c.prios) < priorityMemory {
		c.prios = append(c.prios, p)
	} else {
		c.prios[c.next] = p
		c.next = (c.next + 1) % priorityMemory
	}
	return q
}

// Admit decides whether an offload of the given priority, estimated cost
// (0: unknown), horizon (0: unknown) and extra link time of a raw answer
// (0: unknown; clamped like the cost) runs in the budget (true, with the
// estimate now counted in the backlog) or is answered raw (false).
func (c *Conserver) Admit(priority uint32, costNS, horizonNS, rawExtraNS uint64) (bool, float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	est := c.estimate(costNS)
	q := c.rankLocked(priority)
	if horizonNS > 0 {
		finish := c.slowdown * (c.backlog + est) / float64(c.workers)
		extra := min(float64(rawExtraNS), float64(c.maxCost))
		if finish > float64(horizonNS)*(0.5+0.5*q)+extra {
			return false, 0
		}
	}
	c.backlog += est
	return true, est
}

// Finished records an admitted offload that took busy CPU and held its
// worker for budget, against the estimate Admit returned.
func (c *Conserver) Finished(est float64, busy, budget time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.backlog = max(0, c.backlog-est)
	if busy > 0 {
		c.cost += (float64(busy) - c.cost) * meanWeight
	}
	if est > 0 && budget > 0 {
		if r := float64(budget) / est; !math.IsInf(r, 0) && !math.IsNaN(r) {
			c.slowdown += (r - c.slowdown) * meanWeight
		}
	}
}

// Released takes an admitted offload that never ran (its stream ended, it
// waited past the request timeout) out of the backlog.
func (c *Conserver) Released(est float64) {
	c.mu.Lock()
	c.backlog = max(0, c.backlog-est)
	c.mu.Unlock()
}
