package linkwatch

import (
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// Stats sums the readings of one peer taken through an epoch: the round
// trip's mean and least, the storage agent's bytes in flight (mean and
// peak), its latest delivery rate (Delivery) and, between the first
// reading and the last, its retransmits over its segments. The zero value
// is ready; not safe for concurrent use.
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
	// delivery is the storage agent's delivery rate at the last reading
	// that had its end (0: none).
	delivery float64
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
	if r.RemoteOK && r.Remote.DeliveryRate > 0 {
		s.delivery = r.Remote.DeliveryRate
	}
}

// Delivery is the rate the storage agent's end last saw its data
// delivered at (tcpinfo.Info.DeliveryRate, bytes/s; 0: none). The kernel
// keeps a sample taken while the sender had less to send only where it is
// higher, so it reads the link's rate, not the sender's: a storage agent
// that sends in bursts with the link idle between them still reads what
// the link carries during a burst (BBR's bandwidth sample).
func (s *Stats) Delivery() float64 { return s.delivery }

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
