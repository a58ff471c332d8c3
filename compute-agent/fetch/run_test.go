package fetch

import (
	"testing"
	"time"
)

// TestHorizon: an offload's horizon is the epoch's bytes left over the
// larger of the planner's link rate and the rate measured this epoch.
func TestHorizon(t *testing.T) {
	now := time.Unix(100, 0)
	e := &Epoch{cfg: &Config{Now: func() time.Time { return now }}, linkRate: 1e6, start: now}
	if h := e.horizon(); h != 0 {
		t.Fatalf("horizon %d with nothing left", h)
	}
	e.left.Store(500_000)
	if h := e.horizon(); h != uint64(500*time.Millisecond) {
		t.Fatalf("horizon %v, want 500ms at the planned 1 MB/s", time.Duration(h))
	}
	// 4 MB in 2 s measured: 2 MB/s beats the plan's rate.
	now = now.Add(2 * time.Second)
	e.bytesReceived.Store(4_000_000)
	if h := e.horizon(); h != uint64(250*time.Millisecond) {
		t.Fatalf("horizon %v, want 250ms at the measured 2 MB/s", time.Duration(h))
	}
	e.linkRate = 0
	e.bytesReceived.Store(0)
	if h := e.horizon(); h != 0 {
		t.Fatalf("horizon %v with no rate known", time.Duration(h))
	}
}
