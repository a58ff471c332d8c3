// Package budget shares the storage agent's CPU budget among the requests
// of its clients: the workers a fractional budget of cores runs on and the
// throttle that holds each to its share of a core (Size, Throttle, Time),
// the shares of the budget among the jobs it serves (Jobs, by the
// operator's weights), the fair queue that deals the workers among the
// jobs in proportion to those weights and round-robin among a job's
// clients and their streams (Queue), the work-conserving admission that answers an
// offload raw when the budget cannot finish it before the link runs dry
// (Conserver), and the accounting of what the workers are doing (StallWatch
// for stuck workers, IdleWatch for an idle agent).
//
// The package runs no requests itself: the storage agent's server pushes
// its jobs, its workers take them, and it tells the package what each job
// cost.
package budget

import (
	"context"
	"math"
	"time"
)

// The CPU budget.
//
// Fetch requests from every stream go into one bounded queue served by
// ceil(cpus) workers. With whole cpus that is the budget: a worker runs at
// most one core. With fractional cpus (say 2.5 -> 3 workers) each worker may
// use the share f = cpus/workers of a core (here 0.833): every job occupies
// its worker for busy/f of wall time, so that per worker busy/(wall) <= f:
// after a job that took wall time w it owes sleep = busy/f - w. Busy is the
// job's CPU time on its own thread, read from CLOCK_THREAD_CPUTIME_ID: each
// worker locks its goroutine to an OS thread, so the clock counts exactly
// the reading, decoding (cgo included) and encoding the job did and not time
// it spent descheduled or blocked on I/O. Counting the job's own wall time
// (w >= busy) matters on a shared machine: a job that was descheduled for a
// while (the testbed runs the compute agent on the same cores) has already
// spent part of its budget period waiting, and charging busy*(1-f)/f on top
// would make the agent slower than a dedicated node with f of a core, the
// node the budget stands for. Owed time below minSleep is carried to the
// next job rather than slept, and the time actually slept is subtracted, so
// timer slack evens out.
// NB: idle time waiting for work is not credited (the budget is never
// exceeded, even right after a lull), and CPU the Go runtime spends on other
// threads (garbage collection, the gRPC transport) is outside the budget.
// Without -cpus the agent uses every core; to cap the whole process use a
// cgroup quota, which the testbed does.

// minSleep is the smallest throttle sleep; shorter debts carry over.
const minSleep = time.Millisecond

// RawWorkers serve raw fetches, which run no ops, outside the CPU budget:
// the budget is for preprocessing, and a raw fetch queued behind offloaded
// work would leave the link idle while the throttled workers sleep (the
// epoch then runs longer than max(link, storage CPU), the policies' model,
// predicts). Their CPU time is still reported per sample.
const RawWorkers = 2

// Size returns the worker count for a CPU budget of cpus cores and each
// worker's share of a core.
func Size(cpus float64) (workers int, share float64) {
	workers = max(1, int(math.Ceil(cpus)))
	share = min(1, cpus/float64(workers))
	return workers, share
}

// Throttle is one budgeted worker's idle debt. Each worker owns one.
type Throttle struct {
	share float64
	debt  time.Duration
}

// NewThrottle returns the throttle of a worker with share of a core (from
// Size).
func NewThrottle(share float64) Throttle { return Throttle{share: share} }

// After records a job's busy (thread CPU) and wall time and sleeps what is
// owed, returning early when ctx ends. It returns how much longer than owed
// the sleep took: time the worker could not run although its budget
// allowed (the process's cgroup quota was spent, the machine was busy),
// which the next job's budget time carries (see Time).
func (t *Throttle) After(ctx context.Context, busy, wall time.Duration) (late time.Duration) {
	if t.share >= 1 || busy <= 0 {
		return 0
	}
	wall = max(wall, busy)
	t.debt += time.Duration(float64(busy)/t.share) - wall
	t.debt = max(t.debt, -minSleep) // credit stays small: no bursts after a stall
	if t.debt < minSleep {
		return 0
	}
	start := time.Now()
	tm := time.NewTimer(t.debt)
	select {
	case <-tm.C:
	case <-ctx.Done():
		tm.Stop()
	}
	slept := time.Since(start)
	late = max(0, slept-t.debt)
	t.debt -= slept
	t.debt = max(t.debt, -minSleep)
	return late
}

// Time is the worker time a job held out of the budget: busy/share (the
// throttle holds the worker that long), or the job's wall time when that is
// longer because the worker got less than its share meanwhile (a cgroup
// quota shared with the raw workers and the transport, a busy machine).
// Responses carry it (FetchResponse.storage_budget_ns) so that the compute
// agent's planner sees the storage side's real capacity. late is the
// previous sleep's overrun (Throttle.After): the worker was held although
// its budget allowed it to run, so it counts too.
func Time(busy, wall, late time.Duration, share float64) time.Duration {
	if share <= 0 || share > 1 {
		share = 1
	}
	return max(wall, time.Duration(float64(max(busy, 0))/share)) + max(late, 0)
}
