package schedule

import (
	"testing"
	"time"
)

// TestStallTimeout: a configured timeout stands; else stallFactor of the
// p99 silence, at least minStall.
func TestStallTimeout(t *testing.T) {
	var l Latencies
	if got := l.StallTimeout(0); got != minStall {
		t.Errorf("no silences: %v, want the floor %v", got, minStall)
	}
	for range 100 {
		l.Observe(time.Second)
	}
	if got := l.StallTimeout(0); got != stallFactor*time.Second {
		t.Errorf("1 s silences: %v, want %v", got, stallFactor*time.Second)
	}
	if got := l.StallTimeout(time.Minute); got != time.Minute {
		t.Errorf("configured 1m: %v", got)
	}
}

// hints gives sample s the storage CPU estimate 10 s ns.
type hints bool

func (h hints) Hinted() bool                         { return bool(h) }
func (hints) Hint(s uint64) (prio uint32, ns uint64) { return 1, 10 * s }

// TestCPUOf: a position's estimate is its sample's hint, none without
// hints.
func TestCPUOf(t *testing.T) {
	if f := CPUOf(hints(false), []uint64{1}); f != nil {
		t.Error("an estimate without hints")
	}
	f := CPUOf(hints(true), []uint64{3, 5})
	if got := f(1, 0); got != 50 {
		t.Errorf("position 1 (sample 5): %d ns, want 50", got)
	}
}
