package linkwatch

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// BDPFactor is how many bandwidth-delay products a fetch window covers
// on top of what it holds on a short link (Tracker.BDP): a window that
// is too small measures a rate too low, but BDPFactor of it is twice the
// bytes it held, so the window doubles each reading's interval until the
// link, not the window, bounds the rate.
const BDPFactor = 2

// Tracker is one storage agent's link through an epoch, as its fetcher
// reads it: the readings (Stats), the most bytes the fetch window held
// and the most the agent delivered in one reading's interval, the round
// trip windows are sized by (the least seen: the path's own, not its
// queues) and the mean one deadlines count, and what the epoch leaves the
// next one (Memory). The zero value is ready; safe for concurrent use.
type Tracker struct {
	mu    sync.Mutex
	stats Stats
	// peakBytes is the most bytes the window had outstanding at a reading.
	peakBytes int64
	// lastBytes and lastAt are the bytes served and the time at the
	// previous reading; peakRate the most bytes/s between two readings.
	// seedRate is the last epoch's peakRate (Seed).
	lastBytes int64
	lastAt    time.Time
	peakRate  float64
	seedRate  float64
	// rtt is the least round trip (ns; 0 unknown), rttMean the mean.
	rtt, rttMean atomic.Int64
	// recvWarned: RecvWindowShort said so this epoch.
	recvWarned atomic.Bool
}

// Add takes reading r, made at now while the window had window bytes
// outstanding and the agent had served served bytes this epoch, and
// returns the rate (bytes/s) to size the window by: the most the agent
// delivered between two readings this epoch or the last epoch's (Seed),
// whichever is more. With mem (nil: none) it keeps that most and the
// least round trip for the next epoch.
func (t *Tracker) Add(r Reading, now time.Time, window, served int64, mem *Memory) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.Add(r)
	t.peakBytes = max(t.peakBytes, window)
	if !t.lastAt.IsZero() && served > t.lastBytes {
		if dt := now.Sub(t.lastAt).Seconds(); dt > 0 {
			t.peakRate = max(t.peakRate, float64(served-t.lastBytes)/dt)
		}
	}
	t.lastBytes, t.lastAt = served, now
	if m := t.stats.MinRTT(); m > 0 {
		t.rtt.Store(int64(m))
		if mem != nil && t.peakRate > 0 {
			mem.Store(t.peakRate, m)
		}
	}
	if d, _ := t.stats.RTT(); d > 0 {
		t.rttMean.Store(int64(d))
	}
	return max(t.peakRate, t.seedRate)
}

// Seed starts the tracker where the last epoch's ended (mem, nil: none):
// its rate and round trip stand until this epoch measured its own. It
// returns that rate, and false when mem holds no rate or round trip.
// Call it before the first Add.
func (t *Tracker) Seed(mem *Memory) (float64, bool) {
	if mem == nil {
		return 0, false
	}
	rate, rtt := mem.Load()
	if rate <= 0 || rtt <= 0 {
		return 0, false
	}
	t.mu.Lock()
	t.seedRate = rate
	t.mu.Unlock()
	t.rtt.Store(int64(rtt))
	t.rttMean.Store(int64(rtt))
	return rate, true
}

// Delivery is the delivery rate the storage agent's end last told
// (Stats.Delivery; 0: none yet).
func (t *Tracker) Delivery() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats.Delivery()
}

// RTT is the least round trip seen this epoch, or the one Seed carried
// over (0: none yet).
func (t *Tracker) RTT() time.Duration { return time.Duration(t.rtt.Load()) }

// MeanRTT is the mean round trip of this epoch's readings, or the one
// Seed carried over (0: none yet).
func (t *Tracker) MeanRTT() time.Duration { return time.Duration(t.rttMean.Load()) }

// BDP is BDPFactor bandwidth-delay products at rate bytes/s over RTT.
func (t *Tracker) BDP(rate float64) int64 {
	return int64(BDPFactor * rate * t.RTT().Seconds())
}

// RecvWindowShort reports, once per tracker, that a stream window of
// window bytes is below one bandwidth-delay product at rate (returned
// too): the storage agent then waits for a window update every round
// trip, and the stream carries at most the window per round trip. A
// window of 0 (grpc's own, which grows with the product) is never short.
func (t *Tracker) RecvWindowShort(window int, rate float64) (bdp int64, short bool) {
	bdp = t.BDP(rate) / BDPFactor
	if window <= 0 || bdp <= int64(window) || !t.recvWarned.CompareAndSwap(false, true) {
		return bdp, false
	}
	return bdp, true
}

// Report is the link over the epoch as the report carries it, with the
// most bytes the window held (WindowPeakBytes; the window's bounds are
// the caller's); nil when never read.
func (t *Tracker) Report() *report.Link {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stats.Readings() == 0 {
		return nil
	}
	r := t.stats.Report()
	r.WindowPeakBytes = t.peakBytes
	return r
}
