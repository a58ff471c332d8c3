package storageagent

import (
	"context"
	"runtime"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/budget"
)

// The workers.
//
// A storage agent runs the jobs of every stream on two pools of workers,
// each locked to its OS thread so that the thread CPU clock counts one
// job's work: the budgeted workers (budget.Size of the CPU budget), each
// throttled to its share of a core, take the offloads from the fair queue
// s.queue; budget.RawWorkers unthrottled workers take the raw fetches, which
// run no ops, from s.raw. Package budget says why and how.

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

// rawWorker serves the raw queue until it stops; i is the worker's index
// in the raw pool.
func (s *server) rawWorker(i int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		j, ok := s.raw.Next()
		if !ok {
			return
		}
		t0 := time.Now()
		s.rawBusy.Busy(i, t0)
		s.handle(j, 0)
		s.rawBusy.Free(i)
		s.raw.Charge(j.st.job, float64(time.Since(t0)))
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
	t := budget.NewThrottle(s.share)
	var late time.Duration // the last sleep's overrun, charged to the next job
	var ahead *job         // taken from the queue, its sample being read ahead
	for {
		j := ahead
		if ahead = nil; j == nil {
			var ok bool
			if j, ok = s.queue.Next(); !ok {
				return
			}
		}
		if s.remote {
			ahead = s.readNext()
		}
		t0 := time.Now()
		s.busy.Busy(i, t0)
		busy := s.handle(j, late)
		s.busy.Free(i)
		s.queue.Charge(j.st.job, float64(busy))
		j.waitRead()
		late = t.After(ctx, busy, time.Since(t0))
	}
}

// stopWorkers makes the workers return once their current job is done.
func (s *server) stopWorkers() {
	s.queue.Stop()
	s.raw.Stop()
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
			budget, age := s.busy.Stalled(now, after)
			raw, rawAge := s.rawBusy.Stalled(now, after)
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
