package linkwatch

import (
	"math"
	"testing"
	"time"
)

// TestAutoConns: Mathis's per-connection rate, MSS/RTT x 1.22/sqrt(p),
// divides the link's rate; an unknown path gives one connection, an
// unknown rate the cap.
func TestAutoConns(t *testing.T) {
	const mbit = 1e6 / 8 // bytes/s
	// One connection at 20 ms and 0.1% loss: 1448/0.02 x 1.22/0.0316, 2.79
	// MB/s (22 Mbit/s).
	per := mss / 0.020 * 1.22 / math.Sqrt(0.001)
	for _, c := range []struct {
		name string
		rate float64
		rtt  time.Duration
		loss float64
		max  int
		want int
	}{
		{"no loss", 500 * mbit, 80 * time.Millisecond, 0, 0, 1},
		{"no delay", 500 * mbit, 0, 0.001, 0, 1},
		{"unknown rate", 0, 20 * time.Millisecond, 0.001, 0, MaxConns},
		{"unknown rate, cap 3", 0, 20 * time.Millisecond, 0.001, 3, 3},
		{"one connection's rate", per, 20 * time.Millisecond, 0.001, 0, 1},
		{"just over one", per * 1.01, 20 * time.Millisecond, 0.001, 0, 2},
		{"100 Mbit/s, 20 ms, 0.1%", 100 * mbit, 20 * time.Millisecond, 0.001, 0, 5},
		{"100 Mbit/s, 80 ms, 0.1%: capped", 100 * mbit, 80 * time.Millisecond, 0.001, 0, MaxConns},
		{"cap above MaxConns", 1e12, time.Second, 0.5, 100, MaxConns},
		{"slow link", 1 * mbit, 80 * time.Millisecond, 0.001, 0, 1},
		{"loss over 1", 100 * mbit, 20 * time.Millisecond, 2, 4, 4},
	} {
		if got := AutoConns(c.rate, c.rtt, c.loss, c.max); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
	}
}

// TestFirstConns: before the loss is measured, a path is taken to lose
// PriorLoss: one connection under 10 ms, several on a long path, the cap
// at an unknown rate from 10 ms.
func TestFirstConns(t *testing.T) {
	const mbit = 1e6 / 8
	for _, c := range []struct {
		name string
		rate float64
		rtt  time.Duration
		want int
	}{
		{"no round trip known", 100 * mbit, 0, 1},
		{"LAN, unknown rate", 0, 200 * time.Microsecond, 1},
		{"a loaded host's 5 ms, unknown rate", 0, 5 * time.Millisecond, 1},
		{"10 ms, unknown rate", 0, 10 * time.Millisecond, MaxConns},
		{"100 Mbit/s, 20 ms", 100 * mbit, 20 * time.Millisecond, 5},
		{"100 Mbit/s, 80 ms", 100 * mbit, 80 * time.Millisecond, MaxConns},
		{"unknown rate, 20 ms", 0, 20 * time.Millisecond, MaxConns},
		{"10 Mbit/s, 20 ms", 10 * mbit, 20 * time.Millisecond, 1},
	} {
		if got := FirstConns(c.rate, c.rtt); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
	}
}

// TestRateBased: bbr and its versions are rate-based; loss-based and
// unknown congestion controls are not.
func TestRateBased(t *testing.T) {
	for cc, want := range map[string]bool{"bbr": true, "bbr2": true, "bbr3": true, "cubic": false, "reno": false, "": false, "htcp": false} {
		if got := RateBased(cc); got != want {
			t.Errorf("RateBased(%q) = %v, want %v", cc, got, want)
		}
	}
}
