package budget

import (
	"testing"
	"time"
)

// TestConserverAdmits: without a horizon every offload is admitted; with
// one, an offload whose CPU backlog would finish past it is answered raw,
// and one that finishes by it is admitted, however far into it: an
// offload on time is not sent raw.
func TestConserverAdmits(t *testing.T) {
	ms := uint64(time.Millisecond)
	c := NewConserver(1, time.Second)
	for i := range 5 {
		if ok, _ := c.Admit(10*ms, 0); !ok {
			t.Fatalf("offload %d refused without a horizon", i)
		}
	}
	// Backlog 50 ms + 10 ms against a 200 ms horizon: admitted.
	if ok, _ := c.Admit(10*ms, 200*ms); !ok {
		t.Fatal("offload refused with its finish well inside the horizon")
	}
	// Backlog 60 ms + 60 ms against 100 ms: answered raw.
	if ok, _ := c.Admit(60*ms, 100*ms); ok {
		t.Fatal("offload admitted with its finish past the horizon")
	}
	// Six admitted offloads of 10 ms are in the backlog; the refused one
	// is not.
	if c.backlog != float64(60*ms) {
		t.Fatalf("backlog %v, want 60 ms", time.Duration(c.backlog))
	}
	// At a balanced plan's end: backlog 90 ms + 10 ms against 100 ms, on
	// time, admitted; 1 ms more is not.
	r := NewConserver(1, time.Second)
	r.backlog = float64(90 * ms)
	if ok, _ := r.Admit(10*ms, 100*ms); !ok {
		t.Fatal("an offload finishing right at its horizon was answered raw")
	}
	r.backlog = float64(90 * ms)
	if ok, _ := r.Admit(11*ms, 100*ms); ok {
		t.Fatal("an offload finishing 1 ms past its horizon was admitted")
	}
	// A slower budget (a hog in the cgroup) shows in the slowdown, and
	// a finished or released job leaves the backlog.
	c2 := NewConserver(1, time.Second)
	_, est := c2.Admit(10*ms, 0)
	for range 64 {
		c2.Finished(est, 10*time.Millisecond, 30*time.Millisecond)
	}
	if c2.slowdown < 2.5 {
		t.Fatalf("slowdown %.2f after jobs that held the budget 3x their estimate", c2.slowdown)
	}
	if c2.backlog != 0 {
		t.Fatalf("backlog %v after every admitted job finished", c2.backlog)
	}
	_, est = c2.Admit(10*ms, 0)
	c2.Released(est)
	if c2.backlog != 0 {
		t.Fatalf("backlog %v after the admitted job was released", c2.backlog)
	}
}
