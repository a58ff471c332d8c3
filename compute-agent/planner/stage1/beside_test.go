package stage1

import (
	"math"
	"testing"
	"time"
)

// TestLinkMeter: the rate is the median of the busy spans, so a stall
// (nothing crossing for a while) does not count as a slower link, as it
// does in bytes over time; with too few spans there is none.
func TestLinkMeter(t *testing.T) {
	var m LinkMeter
	t0 := time.Unix(100, 0)
	var b int64
	// 0.1 s of nothing, then 1 s at 10 MB/s with 0.3 s stalled in the
	// middle, sampled every 25 ms.
	for i := 0; i <= 56; i++ {
		at := t0.Add(time.Duration(i) * meterTick)
		if i > 4 && (i < 20 || i >= 32) {
			b += 250_000 // 10 MB/s
		}
		m.sample(at, b)
	}
	got := m.Rate()
	if math.Abs(got-10e6) > 0.02*10e6 {
		t.Errorf("rate %.0f B/s, want 10e6", got)
	}
	if avg := float64(b) / (1.3); avg > 0.8*got {
		t.Errorf("bytes over time %.0f B/s is no lower than the meter's: the test has no stall", avg)
	}
	var short LinkMeter
	for i := range 6 {
		short.sample(t0.Add(time.Duration(i)*meterTick), int64(i)*1000)
	}
	if r := short.Rate(); r != 0 {
		t.Errorf("rate %v from one span, want 0 (too few)", r)
	}
}

// TestLinkMeterPeak: the peak is the busiest peakSpan's rate, whatever
// the median of the busy spans says: 1.2 s at 12 MB/s among 2 s at 6
// MB/s peaks at 12 MB/s while the median stays at 6; with no peakSpan of
// samples there is none.
func TestLinkMeterPeak(t *testing.T) {
	var m LinkMeter
	t0 := time.Unix(100, 0)
	var b int64
	for i := 0; i <= 128; i++ {
		switch {
		case i >= 40 && i < 88:
			b += 300_000 // 12 MB/s
		case i > 0:
			b += 150_000 // 6 MB/s
		}
		m.sample(t0.Add(time.Duration(i)*meterTick), b)
	}
	if got := m.Peak(); math.Abs(got-12e6) > 0.01*12e6 {
		t.Errorf("peak %.0f B/s, want 12e6", got)
	}
	if got := m.Rate(); math.Abs(got-6e6) > 0.3*6e6 {
		t.Errorf("rate %.0f B/s, want about 6e6: the median, not the peak", got)
	}
	var short LinkMeter
	for i := range 40 {
		short.sample(t0.Add(time.Duration(i)*meterTick), int64(i)*1000)
	}
	if p := short.Peak(); p != 0 {
		t.Errorf("peak %v from 975 ms of samples, want 0", p)
	}
}

// TestRawPhaseRate: the rate from the first calibration file's arrival to
// the last one's, only when all arrived.
func TestRawPhaseRate(t *testing.T) {
	t0 := time.Unix(100, 0)
	first := Mark{t0, 300_000}
	if got := RawPhaseRate(first, 8, 8, t0.Add(200*time.Millisecond), 2_700_000); math.Abs(got-12e6) > 1 {
		t.Errorf("2.4 MB in 0.2 s: %.0f B/s, want 12e6", got)
	}
	if got := RawPhaseRate(first, 7, 8, t0.Add(2*time.Second), 2_700_000); got != 0 {
		t.Errorf("7 of 8 files (the wait ran out): %.0f B/s, want 0", got)
	}
	if got := RawPhaseRate(Mark{}, 8, 8, t0, 1); got != 0 {
		t.Errorf("no first arrival: %.0f B/s, want 0", got)
	}
}
