package linkwatch

import (
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// Stats sums the readings of one peer taken through an epoch: the round
// trip's mean and least, the storage agent's bytes in flight (mean and
// peak), its link's busy time (LinkBusy) and, between the first reading
// and the last, its retransmits over its segments. The zero value is
// ready; not safe for concurrent use.
type Stats struct {
	first, last Reading
	n           int
	rttSum      time.Duration
	rttN        int
	minRTT      time.Duration
	from        string
	flightSum   int64
	flightN     int
	flightPeak  int64
	// prev is the last reading with the storage agent's end; busy and
	// over sum LinkBusy, and the time, between such readings.
	prev       Reading
	busy, over time.Duration
}

// Add takes one reading.
func (s *Stats) Add(r Reading) {
	if s.n == 0 {
		s.first = r
	}
	s.last = r
	s.n++
	if d, from := r.RTT(); d > 0 {
		s.rttSum += d
		s.rttN++
		s.from = from
	}
	if m := r.MinRTT(); m > 0 && (s.minRTT == 0 || m < s.minRTT) {
		s.minRTT = m
	}
	if b, ok := r.InFlight(); ok {
		s.flightSum += b
		s.flightN++
		s.flightPeak = max(s.flightPeak, b)
	}
	if !r.RemoteOK || r.At.IsZero() {
		return
	}
	// A counter that went back is a new connection: the interval is
	// skipped.
	if p := s.prev; p.RemoteOK && r.At.After(p.At) && r.Remote.Busy >= p.Remote.Busy && r.Remote.BytesSent >= p.Remote.BytesSent {
		dt := r.At.Sub(p.At)
		s.busy += min(r.Remote.Sub(p.Remote).LinkBusy(), dt)
		s.over += dt
	}
	s.prev = r
}

// LinkBusy is, summed over the intervals between readings that had the
// storage agent's end, the time its end had data on the link or waiting
// for it, less what this end's receive window held back
// (tcpinfo.Info.LinkBusy), and the intervals' length. Their ratio over an
// interval is near 1 where the link bounded what the storage agent sent,
// under it where the storage agent had less to send.
func (s *Stats) LinkBusy() (busy, over time.Duration) { return s.busy, s.over }

// Readings is how many readings Add took.
func (s *Stats) Readings() int { return s.n }

// RTT is the mean round trip of the readings that had one (0: none) and
// where the last came from.
func (s *Stats) RTT() (time.Duration, string) {
	if s.rttN == 0 {
		return 0, ""
	}
	return s.rttSum / time.Duration(s.rttN), s.from
}

// MinRTT is the least round trip seen (0: none).
func (s *Stats) MinRTT() time.Duration { return s.minRTT }

// InFlight is the storage agent's mean and peak bytes in flight; ok is
// false when no reading had its end.
func (s *Stats) InFlight() (mean, peak int64, ok bool) {
	if s.flightN == 0 {
		return 0, 0, false
	}
	return s.flightSum / int64(s.flightN), s.flightPeak, true
}

// Span is the span from the first reading to the last (Between).
func (s *Stats) Span() Span {
	if s.n == 0 {
		return Span{}
	}
	sp := Between(s.first, s.last)
	if d, from := s.RTT(); d > 0 {
		sp.RTT, sp.From = d, from
	}
	if s.minRTT > 0 {
		sp.MinRTT = s.minRTT
	}
	return sp
}

// Report is the readings as the report carries them: Span's, with the
// bytes in flight.
func (s *Stats) Report() *report.Link {
	r := s.Span().Report()
	r.InFlightMeanBytes, r.InFlightPeakBytes, _ = s.InFlight()
	r.Readings = s.n
	return r
}
