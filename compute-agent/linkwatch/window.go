package linkwatch

import (
	"math"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// MaxWindowCount bounds the count of requests a fetch window grows to by
// bandwidth x round trip (WindowCount; a configured base may be more).
const MaxWindowCount = 16384

// WindowCount is the fetch window's count for bdp bytes of mean-sized
// responses on top of base: base plus bdp over mean, at most
// MaxWindowCount and what windowBytes holds of mean responses (base stays
// the floor; without bdp or mean, base).
func WindowCount(base int, bdp, mean, windowBytes int64) int {
	if bdp <= 0 || mean <= 0 {
		return base
	}
	extra := int64(math.Ceil(float64(bdp) / float64(mean)))
	limit := int64(MaxWindowCount)
	if windowBytes > 0 {
		limit = min(limit, max(windowBytes/mean, 1))
	}
	return max(base, int(min(int64(base)+extra, limit)))
}

// FewRTTs is how many round trips a deadline is at least (CountRTT): a
// response cannot come sooner than one, and one more covers the queue at
// the link's bottleneck and a retransmit.
const FewRTTs = 4

// CountRTT is deadline d raised by round trip rtt where it is shorter
// than FewRTTs of it: d plus the round trip, and at least FewRTTs round
// trips. An unknown round trip (0) leaves d.
func CountRTT(d, rtt time.Duration) time.Duration {
	if rtt <= 0 || d >= FewRTTs*rtt {
		return d
	}
	return max(d+rtt, FewRTTs*rtt)
}

// Memory carries the link to one storage agent from one epoch to the
// next: the most it delivered in one reading's interval and the least
// round trip, so that the next epoch's window starts at the size the last
// one grew to instead of growing again through its first second. The
// zero value is ready; safe for concurrent use.
type Memory struct {
	mu   sync.Mutex
	rate float64
	rtt  time.Duration
}

// Load is the rate (bytes/s) and round trip stored last (0: none).
func (m *Memory) Load() (float64, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rate, m.rtt
}

// Store keeps rate and rtt for the next epoch.
func (m *Memory) Store(rate float64, rtt time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rate, m.rtt = rate, rtt
}

// Total is the links of several storage agents together (nil entries
// skipped): the mean round trip, the least minimum, the retransmits and
// segments, bytes in flight and windows summed; nil when none was read.
func Total(links []*report.Link) *report.Link {
	var t report.Link
	n := 0
	t.LossKnown = true
	for _, l := range links {
		if l == nil {
			continue
		}
		if l.RTTSeconds > 0 {
			t.RTTSeconds += l.RTTSeconds
			n++
			t.RTTFrom = l.RTTFrom
		}
		if l.MinRTTSeconds > 0 && (t.MinRTTSeconds == 0 || l.MinRTTSeconds < t.MinRTTSeconds) {
			t.MinRTTSeconds = l.MinRTTSeconds
		}
		t.Retransmits += l.Retransmits
		t.SegmentsOut += l.SegmentsOut
		t.LossKnown = t.LossKnown && l.LossKnown
		t.InFlightMeanBytes += l.InFlightMeanBytes
		t.InFlightPeakBytes += l.InFlightPeakBytes
		t.WindowBytes += l.WindowBytes
		t.WindowCount += l.WindowCount
		t.WindowPeakBytes += l.WindowPeakBytes
		t.Readings += l.Readings
	}
	if t.Readings == 0 {
		return nil
	}
	if n > 0 {
		t.RTTSeconds /= float64(n)
	}
	if t.SegmentsOut > 0 {
		t.Loss = float64(t.Retransmits) / float64(t.SegmentsOut)
	}
	return &t
}
