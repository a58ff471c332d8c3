package schedule

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Retry back-off. Every retry (a Fetch stream, Info, Catalog) waits an
// exponentially growing back-off with jitter, and gives up only when the
// time budget (Config.RetryBudget) since the last progress is spent, so a
// fault costs time, not the run.
const (
	backoffBase = 100 * time.Millisecond
	backoffMax  = 5 * time.Second
)

// RetryDelay is the wait before retry number attempt (1, 2, ...): base x 2^(attempt-1),
// at most backoffMax, with "equal jitter" (a uniform draw from the upper
// half), so that agents restarted together do not retry in lockstep.
func RetryDelay(attempt int) time.Duration {
	d := backoffMax
	if attempt < 16 {
		d = min(backoffBase<<max(attempt-1, 0), backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// Pause waits d, or less when ctx ends (its error) or, with sched set,
// when the epoch's samples are all received (nil): a fetcher backing off
// does not hold the end of the epoch.
func Pause(ctx context.Context, d time.Duration, sched *Schedule) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		var sig <-chan struct{}
		if sched != nil {
			var done bool
			if done, sig = sched.State(); done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case <-sig:
		}
	}
}

// Latencies keeps the last latencyWindow silences of an epoch's streams
// (the time before each response in which the stream, with requests
// outstanding, received nothing) for the adaptive stall timeout.
type Latencies struct {
	mu   sync.Mutex
	ring []time.Duration
	next int
}

const latencyWindow = 512

func (l *Latencies) Observe(d time.Duration) {
	l.mu.Lock()
	if len(l.ring) < latencyWindow {
		l.ring = append(l.ring, d)
	} else {
		l.ring[l.next] = d
		l.next = (l.next + 1) % latencyWindow
	}
	l.mu.Unlock()
}

// The adaptive stall timeout (Latencies.StallTimeout): a stream silent
// for it with requests out is hedged. minStall is its floor, stallFactor
// its multiple of the p99 silence between responses on a busy stream.
const (
	minStall    = 2 * time.Second
	stallFactor = 4
)

// StallTimeout is a stream's progress deadline: configured, or when it is
// 0 max(minStall, stallFactor x P99). The caller counts the round trip
// (linkwatch.CountRTT).
func (l *Latencies) StallTimeout(configured time.Duration) time.Duration {
	if configured > 0 {
		return configured
	}
	return max(minStall, stallFactor*l.P99())
}

// P99 is the 99th percentile of the kept latencies, 0 with none.
func (l *Latencies) P99() time.Duration {
	l.mu.Lock()
	s := slices.Clone(l.ring)
	l.mu.Unlock()
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[(len(s)-1)*99/100]
}
