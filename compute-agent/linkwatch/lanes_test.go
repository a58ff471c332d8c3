package linkwatch

import (
	"slices"
	"testing"
	"time"
)

// TestPaceBytes: a paced window holds PaceTime of its agent's rate plus
// its bandwidth-delay products, at least four mean responses, at most
// the window's bytes.
func TestPaceBytes(t *testing.T) {
	const window = 64 << 20
	for _, c := range []struct {
		name           string
		rate           float64
		bdp, served, n int64
		want           int64
	}{
		{"10 MiB/s", 10 << 20, 0, 10 << 20, 100, int64(float64(10<<20) * PaceTime.Seconds())},
		{"with the round trip", 10 << 20, 1 << 20, 10 << 20, 100, int64(float64(10<<20)*PaceTime.Seconds()) + 1<<20},
		{"0.1 MiB/s: the floor", 0.1 * (1 << 20), 0, 10 << 20, 100, 4 * (10 << 20) / 100},
		{"10 GiB/s: the ceiling", 10 << 30, 0, 10 << 30, 100, window},
	} {
		if got := PaceBytes(c.rate, c.bdp, c.served, c.n, window); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
	}
}

// TestLanes: the raw lane holds RawLead of a known link (at least four
// mean files) plus the bandwidth-delay products, nothing bounded on an
// unknown one; the offloads OffloadLead of the agent's cores (at least
// one), PaceTime when paced, each plus BDPFactor round trips.
func TestLanes(t *testing.T) {
	if got, want := RawFlight(12.5e6, 100_000, 0), int64(12.5e6*RawLead.Seconds()); got != want {
		t.Errorf("raw lane: got %d, want %d", got, want)
	}
	if got, want := RawFlight(12.5e6, 1<<20, 5), int64(4<<20+5); got != want {
		t.Errorf("raw lane of large files: got %d, want %d", got, want)
	}
	if got := RawFlight(0, 1<<20, 5); got != 0 {
		t.Errorf("raw lane, link unknown: got %d, want 0 (unbounded)", got)
	}
	for _, c := range []struct {
		cpus  float64
		paced bool
		rtt   time.Duration
		want  int64
	}{
		{0.5, false, 0, int64(OffloadLead)},
		{2, false, 0, int64(2 * OffloadLead)},
		{1, true, 0, int64(PaceTime)},
		{2, false, 10 * time.Millisecond, int64(2 * (OffloadLead + BDPFactor*10*time.Millisecond))},
	} {
		if got := CPULead(c.cpus, c.paced, c.rtt); got != c.want {
			t.Errorf("CPULead(%v, %v, %v) = %d, want %d", c.cpus, c.paced, c.rtt, got, c.want)
		}
	}
}

// TestStripes: a window is split over its stripes, at least one request
// each, no more stripes than its count; a bound's share rounds up.
func TestStripes(t *testing.T) {
	for _, c := range []struct {
		count, conns int
		want         []int
	}{
		{64, 1, []int{64}},
		{64, 4, []int{16, 16, 16, 16}},
		{10, 4, []int{3, 3, 2, 2}},
		{2, 4, []int{1, 1}},
		{0, 4, []int{1}},
	} {
		if got := Stripes(c.count, c.conns); !slices.Equal(got, c.want) {
			t.Errorf("Stripes(%d, %d) = %v, want %v", c.count, c.conns, got, c.want)
		}
	}
	if got := Share(10, 4); got != 3 {
		t.Errorf("Share(10, 4) = %d, want 3", got)
	}
	if got := Share(0, 4); got != 0 {
		t.Errorf("Share(0, 4) = %d, want 0 (unbounded)", got)
	}
}
