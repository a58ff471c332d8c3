package computeagent

import (
	"context"
	"time"
)

// Clock is the agent's source of time: epoch timing, GPU idle time, the
// simulated consumer's step and retry back-off all go through it, so tests
// can run them on a fake clock.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx ends, whichever is first, and returns
	// ctx's error in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

type systemClock struct{}

// SystemClock is the wall clock.
func SystemClock() Clock { return systemClock{} }

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
