package budget

import (
	"context"
	"testing"
	"time"
)

// TestSize: ceil(cpus) workers, each with its share of a core.
func TestSize(t *testing.T) {
	for _, tc := range []struct {
		cpus    float64
		workers int
		share   float64
	}{
		{0.25, 1, 0.25},
		{1, 1, 1},
		{2.5, 3, 2.5 / 3},
		{4, 4, 1},
	} {
		w, s := Size(tc.cpus)
		if w != tc.workers || s != tc.share {
			t.Errorf("Size(%v) = %d, %v; want %d, %v", tc.cpus, w, s, tc.workers, tc.share)
		}
	}
}

// TestTime: busy/share, or the wall time when the job ran slower
// than its share, plus the previous sleep's overrun.
func TestTime(t *testing.T) {
	for _, tc := range []struct {
		busy, wall, late time.Duration
		share            float64
		want             time.Duration
	}{
		{10 * time.Millisecond, 12 * time.Millisecond, 0, 0.25, 40 * time.Millisecond},
		{10 * time.Millisecond, 55 * time.Millisecond, 0, 0.25, 55 * time.Millisecond},
		{10 * time.Millisecond, 12 * time.Millisecond, 30 * time.Millisecond, 0.25, 70 * time.Millisecond},
		{10 * time.Millisecond, 11 * time.Millisecond, 0, 1, 11 * time.Millisecond},
		{10 * time.Millisecond, 9 * time.Millisecond, 0, 0, 10 * time.Millisecond},
	} {
		if got := Time(tc.busy, tc.wall, tc.late, tc.share); got != tc.want {
			t.Errorf("Time(%v, %v, %v, %v) = %v, want %v", tc.busy, tc.wall, tc.late, tc.share, got, tc.want)
		}
	}
}

// TestThrottle checks the throttle's arithmetic without a clock: with share
// 0.25 a job occupies its worker for four times its busy time, so a job
// that ran undisturbed owes three times its busy time, and one that was
// descheduled for part of its run owes that much less.
func TestThrottle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // sleeping returns at once; the debt is what matters
	th := Throttle{share: 0.25}
	th.After(ctx, 100*time.Microsecond, 100*time.Microsecond)
	if th.debt != 300*time.Microsecond {
		t.Errorf("debt %v, want 300µs carried (below minSleep)", th.debt)
	}
	th = Throttle{share: 0.25}
	th.After(ctx, 100*time.Microsecond, 250*time.Microsecond)
	if th.debt != 150*time.Microsecond {
		t.Errorf("descheduled job: debt %v, want 150µs", th.debt)
	}
	th = Throttle{share: 0.25}
	th.After(ctx, 100*time.Microsecond, time.Millisecond)
	if th.debt != -600*time.Microsecond {
		t.Errorf("starved job: debt %v, want -600µs (credit below minSleep)", th.debt)
	}
	full := Throttle{share: 1}
	full.After(ctx, time.Second, time.Second)
	if full.debt != 0 {
		t.Errorf("whole-core worker owes %v", full.debt)
	}
}
