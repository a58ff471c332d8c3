package storageagent

import (
	"math"
	"sync"
	"time"
)

// Work-conserving offload.
//
// A plan offloads exactly as much work as the storage CPU it was made for
// can do while the link is busy. When that CPU shrinks (a noisy neighbour,
// a hog in the same cgroup), offloaded requests queue behind each other and
// the link, which would have carried their raw bytes meanwhile, goes idle:
// the epoch becomes storage-bound and can end up slower than offloading
// nothing. A request with FetchRequest.fallback set is therefore admitted
// to the budgeted queue only while the budget can finish it before its raw
// bytes would have crossed the link; otherwise it is answered raw, by the
// raw workers, and the compute agent runs every op. The bytes the model
// sees are the same either way.
//
// At admission the controller compares two times:
//
//	cpu  = slowdown x (backlog + cost) / workers
//	link = (unsent + raw) / egress
//
// backlog is the estimated CPU of the offloaded requests admitted and not
// yet finished and cost this request's (FetchRequest.cost_ns, else a running
// mean of finished offloads); slowdown is a running mean, over finished
// offloads, of the worker time each held out of the budget (budgetTime: it
// grows when the workers get less CPU than their share) over its estimated
// cost; unsent is the bytes of results waiting to be sent and raw the
// request's file size; egress is the rate results left the agent over the
// last second. A request whose cpu time exceeds its link time is answered
// raw.
//
// Which requests keep their offload is the plan's ranking: each carries its
// efficiency (FetchRequest.priority: bytes saved per storage CPU-ms). A
// request refused for time raises the admission threshold a quarter of the
// way to its priority; an admitted request with cpu below half its link
// time lowers it by a sixteenth; requests below the threshold are answered
// raw without queueing. Under sustained contention the threshold settles
// where the offloads admitted match the CPU left, and those are the ones
// that save the most bytes per CPU-millisecond.

const (
	// conserveWindow is the span over which the egress rate is measured.
	conserveWindow = time.Second
	// defaultOffloadCost is an offload's estimated CPU before any has
	// finished and when requests carry no estimate.
	defaultOffloadCost = 10 * time.Millisecond
	// meanWeight is the weight of a new observation in the running means.
	meanWeight = 1.0 / 16
)

// conserver is the admission controller of work-conserving offload.
type conserver struct {
	workers int
	maxCost time.Duration // a request's cost estimate is clamped to this

	mu       sync.Mutex
	backlog  float64 // estimated ns of admitted, unfinished offloads
	cost     float64 // running mean of an offload's cost, ns
	slowdown float64 // running mean of budget time / estimated cost
	theta    float64 // admission threshold on priority
	sends    []sendMark
	sentSum  int64 // bytes of sends
	admitted int64
	demoted  int64
}

// sendMark is one response sent: when, and its bytes.
type sendMark struct {
	at    time.Time
	bytes int64
}

func newConserver(workers int, maxCost time.Duration) *conserver {
	return &conserver{workers: max(workers, 1), maxCost: maxCost, cost: float64(defaultOffloadCost), slowdown: 1}
}

// estimate is the CPU a request is expected to cost: its own estimate,
// clamped, or the running mean.
func (c *conserver) estimate(costNS uint64) float64 {
	if costNS == 0 {
		return c.cost
	}
	return min(float64(costNS), float64(c.maxCost))
}

// admit decides whether an offload of the given priority, estimated cost
// (0: unknown) and raw size runs in the budget (true, its estimate now
// counted in the backlog) or is answered raw (false). unsent is the bytes
// of results waiting to be sent, the agent's whole.
func (c *conserver) admit(now time.Time, priority uint32, costNS uint64, raw, unsent int64) (bool, float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	est := c.estimate(costNS)
	if float64(priority) < c.theta {
		c.demoted++
		return false, 0
	}
	egress := c.egressLocked(now)
	if egress > 0 {
		cpu := c.slowdown * (c.backlog + est) / float64(c.workers)
		link := float64(unsent+raw) / egress * 1e9
		if cpu > link {
			if p := float64(priority); p > c.theta {
				c.theta += (p - c.theta) / 4
			}
			c.demoted++
			return false, 0
		}
		if cpu < link/2 {
			c.theta -= c.theta / 16
		}
	}
	c.backlog += est
	c.admitted++
	return true, est
}

// finished records an admitted offload that took busy CPU and held its
// worker for budget, against the estimate admit returned.
func (c *conserver) finished(est float64, busy, budget time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.backlog = max(0, c.backlog-est)
	if busy > 0 {
		c.cost += (float64(busy) - c.cost) * meanWeight
	}
	if est > 0 && budget > 0 {
		r := float64(budget) / est
		if !math.IsInf(r, 0) && !math.IsNaN(r) {
			c.slowdown += (r - c.slowdown) * meanWeight
		}
	}
}

// released takes an admitted offload that never ran (its stream ended)
// out of the backlog.
func (c *conserver) released(est float64) {
	c.mu.Lock()
	c.backlog = max(0, c.backlog-est)
	c.mu.Unlock()
}

// sent records a response of n bytes handed to the transport.
func (c *conserver) sent(now time.Time, n int64) {
	c.mu.Lock()
	c.sends = append(c.sends, sendMark{at: now, bytes: n})
	c.sentSum += n
	c.trimLocked(now)
	c.mu.Unlock()
}

func (c *conserver) trimLocked(now time.Time) {
	i := 0
	for i < len(c.sends) && now.Sub(c.sends[i].at) > conserveWindow {
		c.sentSum -= c.sends[i].bytes
		i++
	}
	if i > 0 {
		c.sends = append(c.sends[:0], c.sends[i:]...)
	}
}

// egressLocked is the bytes per second sent over the last window; 0 until
// a window's worth is known.
func (c *conserver) egressLocked(now time.Time) float64 {
	c.trimLocked(now)
	if len(c.sends) < 2 {
		return 0
	}
	span := now.Sub(c.sends[0].at)
	if span < conserveWindow/4 {
		return 0
	}
	return float64(c.sentSum) / span.Seconds()
}

// counts returns the offloads admitted and answered raw so far.
func (c *conserver) counts() (admitted, demoted int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admitted, c.demoted
}
