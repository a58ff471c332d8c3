package storageagent

import (
	"context"
	"math"
	"runtime"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
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

// poolSize returns the worker count for a CPU budget and each worker's
// share of a core.
func poolSize(cpus float64) (workers int, share float64) {
	workers = max(1, int(math.Ceil(cpus)))
	share = min(1, cpus/float64(workers))
	return workers, share
}

// throttle is one worker's idle debt.
type throttle struct {
	share float64
	debt  time.Duration
}

// after records a job's busy (thread CPU) and wall time and sleeps what is
// owed, returning early when ctx ends. It returns how much longer than owed
// the sleep took: time the worker could not run although its budget
// allowed (the process's cgroup quota was spent, the machine was busy),
// which the next job's budget time carries (see budgetTime).
func (t *throttle) after(ctx context.Context, busy, wall time.Duration) (late time.Duration) {
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

// budgetTime is the worker time a job held out of the budget: busy/share
// (the throttle holds the worker that long), or the job's wall time when
// that is longer because the worker got less than its share meanwhile (a
// cgroup quota shared with the raw workers and the transport, a busy
// machine). Responses carry it (FetchResponse.storage_budget_ns) so that
// the compute agent's planner sees the storage side's real capacity.
// late is the previous sleep's overrun (throttle.after): the worker was
// held although its budget allowed it to run, so it counts too.
func budgetTime(busy, wall, late time.Duration, share float64) time.Duration {
	if share <= 0 || share > 1 {
		share = 1
	}
	return max(wall, time.Duration(float64(max(busy, 0))/share)) + max(late, 0)
}

// isRaw reports whether a request runs no ops: an uncompressed split-0
// fetch, not cut, only reads the file into its wire form.
func isRaw(req *dataplanepb.FetchRequest) bool {
	return req.GetSplit() == 0 && !req.GetCut() && req.GetCodec() == dataplanepb.Codec_CODEC_NONE
}

// raw reports whether the job is served raw: a raw request, or an offload
// answered raw (work-conserving offload).
func (j *job) raw() bool {
	return j.served == dataplanepb.Served_SERVED_RAW_CONTENDED || isRaw(j.req)
}

// RawWorkers serve raw fetches, which run no ops, outside the CPU budget:
// the budget is for preprocessing, and a raw fetch queued behind offloaded
// work would leave the link idle while the throttled workers sleep (the
// epoch then runs longer than max(link, storage CPU), the policies' model,
// predicts). Their CPU time is still reported per sample.
const RawWorkers = 2

// rawWorker serves the raw queue until it stops; i is the worker's index
// in the raw pool.
func (s *server) rawWorker(i int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		j := s.raw.next()
		if j == nil {
			return
		}
		s.rawBusy.since[i].Store(time.Now().UnixNano())
		s.handle(j, 0)
		s.rawBusy.since[i].Store(0)
	}
}

// worker serves the budgeted queue until it stops, sleeping between jobs
// what the CPU budget owes (ctx cuts a sleep short); i is the worker's
// index in the pool.
func (s *server) worker(ctx context.Context, i int) {
	// Lock the goroutine to its thread so the thread CPU clock is this
	// worker's alone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t := throttle{share: s.share}
	var late time.Duration // the last sleep's overrun, charged to the next job
	var ahead *job         // taken from the queue, its sample being read ahead
	for {
		j := ahead
		if ahead = nil; j == nil {
			if j = s.queue.next(); j == nil {
				return
			}
		}
		if s.remote {
			ahead = s.readNext()
		}
		t0 := time.Now()
		s.busy.since[i].Store(t0.UnixNano())
		busy := s.handle(j, late)
		s.busy.since[i].Store(0)
		j.waitRead()
		late = t.after(ctx, busy, time.Since(t0))
	}
}

// stopWorkers makes the workers return once their current job is done.
func (s *server) stopWorkers() {
	s.queue.stop()
	s.raw.stop()
}

// watch sets the health service NOT_SERVING while every worker of a pool
// has been on its current job for longer than after (stuck workers: a
// client would only queue behind them), and SERVING again once one moves.
// It checks every after/4 until ctx ends.
func (s *server) watch(ctx context.Context, hs *health.Server, after time.Duration) {
	tick := time.NewTicker(max(after/4, 10*time.Millisecond))
	defer tick.Stop()
	stalled := false
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			budget, age := s.busy.stalled(now, after)
			raw, rawAge := s.rawBusy.stalled(now, after)
			if (budget || raw) == stalled {
				continue
			}
			stalled = budget || raw
			st := healthpb.HealthCheckResponse_SERVING
			if stalled {
				st = healthpb.HealthCheckResponse_NOT_SERVING
				s.log.Error().Dur("budgeted_workers_stuck_for", age).Dur("raw_workers_stuck_for", rawAge).
					Dur("stall_timeout", after).Msg("every worker of a pool is stuck on one job: health NOT_SERVING")
				s.m.stalled.Set(1)
			} else {
				s.log.Info().Msg("workers progress again: health SERVING")
				s.m.stalled.Set(0)
			}
			hs.SetServingStatus("", st)
			hs.SetServingStatus(dataplanepb.Storage_ServiceDesc.ServiceName, st)
		}
	}
}
