package budget

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestReleaseWhenIdle: the release runs once per burst, at the first tick
// that finds no job running and none started since the tick before, and
// never while jobs run or before any has (in a synctest bubble: the ticker
// is fake time).
func TestReleaseWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const period = time.Second
		var w IdleWatch
		var released atomic.Int64
		ctx, cancel := context.WithCancel(t.Context())
		tick := time.NewTicker(period)
		defer tick.Stop()
		var wg sync.WaitGroup
		wg.Go(func() { w.ReleaseWhenIdle(ctx, tick.C, func() { released.Add(1) }) })
		// wait lets n periods pass and returns the releases meanwhile.
		wait := func(n int) int64 {
			before := released.Load()
			time.Sleep(time.Duration(n)*period + period/2)
			synctest.Wait()
			return released.Load() - before
		}
		if n := wait(3); n != 0 {
			t.Fatalf("%d releases before any job, want 0", n)
		}
		w.Begin()
		if n := wait(3); n != 0 {
			t.Fatalf("%d releases while a job runs, want 0", n)
		}
		w.End()
		if n := wait(1); n != 1 {
			t.Fatalf("%d releases one period after the job, want 1", n)
		}
		if n := wait(5); n != 0 {
			t.Fatalf("%d more releases while idle, want 0", n)
		}
		w.Begin()
		w.End()
		if n := wait(2); n != 1 {
			t.Fatalf("%d releases after a second burst, want 1", n)
		}
		cancel()
		wg.Wait()
	})
}

// TestStallWatch: a pool is stalled only while every worker has been on
// its current job for longer than the timeout; an idle worker clears it.
func TestStallWatch(t *testing.T) {
	now := time.Unix(1000, 0)
	w := NewStallWatch(2)
	if stalled, _ := w.Stalled(now, time.Second); stalled {
		t.Fatal("an idle pool is stalled")
	}
	w.Busy(0, now.Add(-5*time.Second))
	if stalled, _ := w.Stalled(now, time.Second); stalled {
		t.Fatal("stalled with one worker idle")
	}
	w.Busy(1, now.Add(-2*time.Second))
	stalled, age := w.Stalled(now, time.Second)
	if !stalled || age != 2*time.Second {
		t.Fatalf("both workers stuck: got %v, %v; want true, 2s (the most recent job's age)", stalled, age)
	}
	if stalled, _ := w.Stalled(now, 3*time.Second); stalled {
		t.Fatal("stalled before the most recent job passed the timeout")
	}
	w.Free(1)
	if stalled, _ := w.Stalled(now, time.Second); stalled {
		t.Fatal("stalled after a worker moved on")
	}
}
