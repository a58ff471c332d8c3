package budget

import (
	"context"
	"sync/atomic"
	"time"
)

// StallWatch records when each worker of a pool took its current job, to
// tell a pool whose workers are all stuck (the storage agent's health goes
// NOT_SERVING) from one that is merely busy. Each worker marks only its
// own index; Stalled may run concurrently.
type StallWatch struct {
	since []atomic.Int64 // unix nanoseconds; 0 while the worker is idle
}

// NewStallWatch returns the watch of a pool of workers workers.
func NewStallWatch(workers int) *StallWatch {
	return &StallWatch{since: make([]atomic.Int64, workers)}
}

// Busy marks worker i as on a job taken at t; Free marks it idle.
func (w *StallWatch) Busy(i int, t time.Time) { w.since[i].Store(t.UnixNano()) }
func (w *StallWatch) Free(i int)              { w.since[i].Store(0) }

// Stalled reports whether every worker has been on its current job for
// longer than after, and since when the most recent of them has.
func (w *StallWatch) Stalled(now time.Time, after time.Duration) (bool, time.Duration) {
	var newest int64
	for i := range w.since {
		t := w.since[i].Load()
		if t == 0 {
			return false, 0
		}
		newest = max(newest, t)
	}
	age := now.Sub(time.Unix(0, newest))
	return len(w.since) > 0 && age > after, age
}

// IdleWatch counts the jobs the workers run, so that a periodic check can
// tell an idle agent from a busy one without a clock read per job. The
// zero value is ready; its methods are safe for concurrent use.
type IdleWatch struct {
	active  atomic.Int64  // jobs being handled
	started atomic.Uint64 // jobs ever started
}

// Begin and End bracket one job.
func (w *IdleWatch) Begin() { w.active.Add(1); w.started.Add(1) }
func (w *IdleWatch) End()   { w.active.Add(-1) }

// ReleaseWhenIdle calls release once per burst: at the first tick that
// finds no job running and none started since the tick before, provided a
// job has started since the last release. So release runs between one and
// two tick periods after a burst's last job. It returns when ctx ends.
func (w *IdleWatch) ReleaseWhenIdle(ctx context.Context, tick <-chan time.Time, release func()) {
	last, dirty := w.started.Load(), false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		n := w.started.Load()
		if n != last || w.active.Load() != 0 {
			last, dirty = n, true
			continue
		}
		if dirty {
			release()
			dirty = false
		}
	}
}
