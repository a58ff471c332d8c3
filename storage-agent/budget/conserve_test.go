package budget

import (
	"testing"
	"time"
)

// TestConserverAdmits: without a horizon every offload is admitted; with
// one, an offload whose CPU backlog would finish past it is answered raw,
// and near that boundary the less efficient requests are answered raw
// first.
func TestConserverAdmits(t *testing.T) {
	ms := uint64(time.Millisecond)
	c := NewConserver(1, time.Second)
	for i := range 5 {
		if ok, _ := c.Admit(100, 10*ms, 0, 0); !ok {
			t.Fatalf("offload %d refused without a horizon", i)
		}
	}
	// Backlog 50 ms + 10 ms against a 200 ms horizon: admitted (the
	// priority ranks at the median of what was seen, 0.75 x 200 ms).
	if ok, _ := c.Admit(100, 10*ms, 200*ms, 0); !ok {
		t.Fatal("offload refused with its finish well inside the horizon")
	}
	// Backlog 60 ms + 60 ms against 100 ms: answered raw.
	if ok, _ := c.Admit(100, 60*ms, 100*ms, 0); ok {
		t.Fatal("offload admitted with its finish past the horizon")
	}
	// Six admitted offloads of 10 ms are in the backlog; the refused one
	// is not.
	if c.backlog != float64(60*ms) {
		t.Fatalf("backlog %v, want 60 ms", time.Duration(c.backlog))
	}
	// The same finish against the same horizon: the most efficient
	// request gets in, the least efficient does not.
	r := NewConserver(1, time.Second)
	for p := range uint32(100) {
		r.rankLocked(p * 10)
	}
	r.backlog = float64(70 * ms)
	if ok, _ := r.Admit(5000, 10*ms, 100*ms, 0); !ok {
		t.Fatal("the most efficient offload was refused 80 ms into a 100 ms horizon")
	}
	r.backlog = float64(70 * ms)
	if ok, _ := r.Admit(0, 10*ms, 100*ms, 0); ok {
		t.Fatal("the least efficient offload was admitted 80 ms into a 100 ms horizon (it has half)")
	}
	// A raw answer's extra link time raises the limit by as much: 110 ms
	// into a 100 ms horizon the most efficient offload of a file whose
	// raw answer would take 20 ms more of the link still runs, one whose
	// raw answer takes 5 ms more does not; the extra is clamped to the
	// cost's bound.
	x := NewConserver(1, 50*time.Millisecond)
	for p := range uint32(100) {
		x.rankLocked(p * 10)
	}
	for _, tc := range []struct {
		extra uint64
		admit bool
	}{{0, false}, {5 * ms, false}, {20 * ms, true}, {uint64(time.Hour), true}} {
		x.backlog = float64(100 * ms)
		if ok, _ := x.Admit(5000, 10*ms, 100*ms, tc.extra); ok != tc.admit {
			t.Errorf("finish 110 ms, horizon 100 ms, raw answer %v more of the link: admitted %v, want %v", time.Duration(tc.extra), ok, tc.admit)
		}
	}
	x.backlog = float64(160 * ms)
	if ok, _ := x.Admit(5000, 10*ms, 100*ms, uint64(time.Hour)); ok {
		t.Error("finish 170 ms admitted against 100 ms + an extra clamped to 50 ms")
	}
	// A slower budget (a hog in the cgroup) shows in the slowdown, and
	// a finished or released job leaves the backlog.
	c2 := NewConserver(1, time.Second)
	_, est := c2.Admit(0, 10*ms, 0, 0)
	for range 64 {
		c2.Finished(est, 10*time.Millisecond, 30*time.Millisecond)
	}
	if c2.slowdown < 2.5 {
		t.Fatalf("slowdown %.2f after jobs that held the budget 3x their estimate", c2.slowdown)
	}
	if c2.backlog != 0 {
		t.Fatalf("backlog %v after every admitted job finished", c2.backlog)
	}
	_, est = c2.Admit(0, 10*ms, 0, 0)
	c2.Released(est)
	if c2.backlog != 0 {
		t.Fatalf("backlog %v after the admitted job was released", c2.backlog)
	}
}
