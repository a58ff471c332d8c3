package budget

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestShareOf(t *testing.T) {
	for _, tc := range []struct {
		cpus, weight, total, want float64
	}{
		{2, 1, 2, 1},
		{2, 2, 3, 4.0 / 3},
		{1.5, 1, 1, 1.5},
		{2, 1, 0, 0},
		{2, 0, 1, 0},
		{2, 3, 1, 2}, // never more than the budget
	} {
		if got := ShareOf(tc.cpus, tc.weight, tc.total); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("ShareOf(%v, %v, %v) = %v, want %v", tc.cpus, tc.weight, tc.total, got, tc.want)
		}
	}
}

// TestJobsShares: the share follows the active jobs and their weights: a
// job with an open stream stays active, one without drops out after the
// window, and the asking job counts itself.
func TestJobsShares(t *testing.T) {
	t0 := time.Unix(1000, 0)
	js, err := NewJobs(JobsConfig{CPUs: 3, Weights: map[string]float64{"big": 2}, Window: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if sh := js.Share("a", t0); sh.CPUs != 3 || sh.Jobs != 1 {
		t.Fatalf("alone: got %+v, want 3 cpus, 1 job", sh)
	}
	closeA, err := js.Open("a", t0)
	if err != nil {
		t.Fatal(err)
	}
	js.Seen("big", t0)
	if sh := js.Share("a", t0); math.Abs(sh.CPUs-1) > 1e-12 || sh.Jobs != 2 || sh.Total != 3 {
		t.Fatalf("a beside big: got %+v, want 1 cpu of 3, 2 jobs", sh)
	}
	if sh := js.Share("big", t0); math.Abs(sh.CPUs-2) > 1e-12 {
		t.Fatalf("big beside a: got %+v, want 2 cpus", sh)
	}
	// big's window passes; a's stream keeps it active.
	t1 := t0.Add(11 * time.Second)
	if sh := js.Share("a", t1); sh.CPUs != 3 || sh.Jobs != 1 {
		t.Fatalf("after big's window: got %+v, want 3 cpus, 1 job", sh)
	}
	if got := js.Active(t1); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("active %v, want [a]", got)
	}
	closeA(t1)
	if sh := js.Share("c", t1.Add(5*time.Second)); sh.CPUs != 1.5 || sh.Jobs != 2 {
		t.Fatalf("a closed 5 s ago: got %+v, want 1.5 cpus, 2 jobs", sh)
	}
	if sh := js.Share("c", t1.Add(11*time.Second)); sh.CPUs != 3 {
		t.Fatalf("a closed 11 s ago: got %+v, want 3 cpus", sh)
	}
}

// TestJobsLeave: a job that leaves drops out of the shares at once, or
// when its last stream closes; a later request brings it back.
func TestJobsLeave(t *testing.T) {
	t0 := time.Unix(1000, 0)
	js, err := NewJobs(JobsConfig{CPUs: 2, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	js.Seen("a", t0)
	js.Seen("b", t0)
	if sh := js.Share("b", t0); sh.CPUs != 1 || sh.Jobs != 2 {
		t.Fatalf("a and b: got %+v, want 1 cpu of 2 jobs", sh)
	}
	js.Leave("a")
	if sh := js.Share("b", t0); sh.CPUs != 2 || sh.Jobs != 1 {
		t.Fatalf("a left: got %+v, want 2 cpus, 1 job", sh)
	}
	js.Leave("nobody") // unknown: nothing happens
	// With a stream open a leaving job stays until the stream closes.
	closeA, err := js.Open("a", t0)
	if err != nil {
		t.Fatal(err)
	}
	closeA2, err := js.Open("a", t0)
	if err != nil {
		t.Fatal(err)
	}
	js.Leave("a")
	closeA(t0)
	if sh := js.Share("b", t0); sh.CPUs != 1 || sh.Jobs != 2 {
		t.Fatalf("a leaving with a stream open: got %+v, want 1 cpu of 2 jobs", sh)
	}
	closeA2(t0)
	if got := js.Active(t0); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a's last stream closed: active %v, want [b]", got)
	}
	// A request after leaving makes it active again, for the window.
	js.Leave("b")
	js.Seen("b", t0)
	closeB, err := js.Open("b", t0)
	if err != nil {
		t.Fatal(err)
	}
	closeB(t0)
	if got := js.Active(t0.Add(30 * time.Second)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("b back after leaving: active %v, want [b]", got)
	}
}

// TestJobsOff: with shares off every job is told the whole budget.
func TestJobsOff(t *testing.T) {
	now := time.Unix(1000, 0)
	js, err := NewJobs(JobsConfig{CPUs: 2, Off: true})
	if err != nil {
		t.Fatal(err)
	}
	js.Seen("a", now)
	js.Seen("b", now)
	if sh := js.Share("a", now); sh.CPUs != 2 || sh.Jobs != 2 {
		t.Fatalf("got %+v, want 2 cpus, 2 jobs", sh)
	}
}

// TestJobsMax: a stream of a new job beyond Max is refused until one
// leaves.
func TestJobsMax(t *testing.T) {
	now := time.Unix(1000, 0)
	js, err := NewJobs(JobsConfig{CPUs: 1, Max: 2, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := js.Open("j"+strconv.Itoa(i), now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Open("j2", now); !errors.Is(err, ErrTooManyJobs) {
		t.Fatalf("third job: got %v, want ErrTooManyJobs", err)
	}
	js.Seen("j3", now)
	if got := js.Active(now); len(got) != 2 {
		t.Fatalf("active %v: Seen recorded a job past the limit", got)
	}
	if _, err := js.Open("j0", now); err != nil {
		t.Fatalf("another stream of an active job: %v", err)
	}
	if _, err := NewJobs(JobsConfig{CPUs: 1, Weights: map[string]float64{"x": 0}}); err == nil {
		t.Fatal("a zero weight was accepted")
	}
}

// TestQueueWeighted: two backlogged jobs of weights 2 and 1 whose requests
// cost the same get 2:1 of the turns; a job whose requests cost twice as
// much gets half the turns for the same worker time.
func TestQueueWeighted(t *testing.T) {
	for _, tc := range []struct {
		name         string
		wa, wb       float64
		costA, costB float64
		wantA, wantB int // turns out of 300
	}{
		{"weights 2:1", 2, 1, 1e6, 1e6, 200, 100},
		{"equal weights, cost 2:1", 1, 1, 2e6, 1e6, 100, 200},
		{"equal", 1, 1, 1e6, 1e6, 150, 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := NewQueue[*stream, string](func(*stream) bool { return true })
			a, b := &stream{name: "a"}, &stream{name: "b"}
			for range 400 {
				q.PushJob(a, "A", tc.wa, "host1", "A")
				q.PushJob(b, "B", tc.wb, "host2", "B")
			}
			got := map[string]int{}
			for range 300 {
				j, ok := q.TryNext()
				if !ok {
					t.Fatal("queue ran dry")
				}
				got[j]++
				cost := tc.costA
				if j == "B" {
					cost = tc.costB
				}
				q.Charge(j, cost)
			}
			if d := got["A"] - tc.wantA; d < -3 || d > 3 {
				t.Fatalf("turns %v, want A %d, B %d (within 3)", got, tc.wantA, tc.wantB)
			}
		})
	}
}

// TestQueueJobNoCredit: a job that was idle while another was served does
// not get the turns it missed when it comes back: it alternates with the
// other at once.
func TestQueueJobNoCredit(t *testing.T) {
	q := NewQueue[*stream, string](func(*stream) bool { return true })
	a, b := &stream{name: "a"}, &stream{name: "b"}
	for range 100 {
		q.PushJob(a, "A", 1, "h", "A")
	}
	for range 50 {
		j, _ := q.TryNext()
		q.Charge(j, 1e6)
	}
	for range 10 {
		q.PushJob(b, "B", 1, "h", "B")
	}
	var got []string
	for range 10 {
		j, _ := q.TryNext()
		q.Charge(j, 1e6)
		got = append(got, j)
	}
	n := 0
	for _, j := range got {
		if j == "B" {
			n++
		}
	}
	if n < 4 || n > 6 {
		t.Fatalf("after coming back B got %d of 10 turns (%v), want 5 +- 1", n, got)
	}
}

// TestQueueClientsWithinJob: within one job, clients are served
// round-robin whatever their streams, as without jobs.
func TestQueueClientsWithinJob(t *testing.T) {
	q := NewQueue[*stream, string](func(*stream) bool { return true })
	a1, a2, b := &stream{name: "a1"}, &stream{name: "a2"}, &stream{name: "b"}
	for i := range 2 {
		q.PushJob(a1, "J", 1, "alice", "a1."+strconv.Itoa(i))
		q.PushJob(a2, "J", 1, "alice", "a2."+strconv.Itoa(i))
		q.PushJob(b, "J", 1, "bob", "b."+strconv.Itoa(i))
	}
	got := drain(q)
	want := []string{"a1.0", "b.0", "a2.0", "b.1", "a1.1", "a2.1"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
