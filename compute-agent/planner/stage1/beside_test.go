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
