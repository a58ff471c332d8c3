package schedule

import (
	"slices"
	"testing"
)

func testWindow(count int) *Window {
	return &Window{MaxCount: count, MaxBytes: 1 << 30, Outstanding: map[uint64]*Request{}}
}

func est(pos int) (int64, uint64, int) { return 1, uint64(pos), 0 }

// takeAll takes positions until the window is full.
func takeAll(t *testing.T, s *Schedule, w *Window) []int {
	t.Helper()
	return takeWith(s, w, est)
}

// takeWith takes positions priced by est until the window is full.
func takeWith(s *Schedule, w *Window, est func(pos int) (int64, uint64, int)) []int {
	var got []int
	for {
		r, _, done := s.Take(w, est)
		if done || r == nil {
			return got
		}
		got = append(got, r.Pos)
	}
}

// TestScheduleLanes: with raw and offloaded positions mixed, a window holds
// at most half its count of each kind, each kind in permutation order, so
// the link and the storage CPU both have work; once one kind is used up the
// other gets the whole window; every position is taken exactly once.
func TestScheduleLanes(t *testing.T) {
	off := []bool{true, true, true, true, false, false, false, false, true, false}
	s := NewSchedule(len(off), 0, 1, off)
	w := testWindow(4)
	if got := takeAll(t, s, w); !slices.Equal(got, []int{0, 1, 4, 5}) {
		t.Fatalf("first window %v, want [0 1 4 5]: two of each kind", got)
	}
	// Raw ones complete first (the link is quick): more raw ones go out,
	// not the offloaded position 2 beyond the offloaded half.
	for _, r := range w.Outstanding {
		if !off[r.Pos] {
			s.Release(w, r)
			delete(w.Outstanding, r.Tag)
		}
	}
	if got := takeAll(t, s, w); !slices.Equal(got, []int{6, 7}) {
		t.Fatalf("after the raw ones: %v, want [6 7]", got)
	}
	// Drain: every position exactly once.
	seen := map[int]int{0: 1, 1: 1, 4: 1, 5: 1, 6: 1, 7: 1}
	for len(seen) < len(off) {
		for tag, r := range w.Outstanding {
			s.Release(w, r)
			delete(w.Outstanding, tag)
		}
		got := takeAll(t, s, w)
		if len(got) == 0 {
			t.Fatalf("stuck with %v taken", seen)
		}
		for _, p := range got {
			seen[p]++
		}
	}
	for p, c := range seen {
		if c != 1 {
			t.Errorf("position %d taken %d times", p, c)
		}
	}
	if w.laneCount[0]+w.laneCount[1] != w.Count {
		t.Errorf("lane counts %v, count %d", w.laneCount, w.Count)
	}
}

// TestScheduleLaneBounds: in a two-lane epoch the raw fetches in flight
// stop at MaxRawFlight bytes and the offloads at MaxCPU (the first of each
// always goes); a full lane gives its turn to the other lane's next
// position, and an answer (Claim, before the worker releases the slot)
// gives the room back.
func TestScheduleLaneBounds(t *testing.T) {
	off := []bool{false, false, false, false, true, true, true, true}
	s := NewSchedule(len(off), 0, 1, off)
	s.CPUOf = func(int, int) int64 { return 5 }
	est := func(pos int) (int64, uint64, int) {
		if off[pos] {
			return 10, uint64(pos), 1
		}
		return 100, uint64(pos), 0
	}
	w := testWindow(8)
	w.MaxRawFlight, w.MaxCPU = 250, 10
	take := func() []int { return takeWith(s, w, est) }
	claim := func(pos int) {
		for tag, r := range w.Outstanding {
			if r.Pos == pos {
				if got, _ := s.Claim(w, tag, r.Bytes); got == nil {
					t.Fatalf("claim of position %d refused", pos)
				}
				return
			}
		}
		t.Fatalf("position %d not outstanding", pos)
	}
	if got := take(); !slices.Equal(got, []int{0, 1, 4, 5}) {
		t.Fatalf("first: %v, want [0 1 4 5] (two raw within 250 bytes, two offloads within 10 ns)", got)
	}
	if w.RawFlight != 200 || w.CPU != 10 {
		t.Fatalf("in flight: %d raw bytes, %d ns, want 200 and 10", w.RawFlight, w.CPU)
	}
	claim(0)
	if got := take(); !slices.Equal(got, []int{2}) {
		t.Fatalf("after raw 0 answered: %v, want [2]", got)
	}
	claim(4)
	if got := take(); !slices.Equal(got, []int{6}) {
		t.Fatalf("after offload 4 answered: %v, want [6] (raw 3 still past the bound)", got)
	}
	if w.RawFlight != 200 || w.CPU != 10 || w.Count != 6 {
		t.Fatalf("in flight: %d raw bytes, %d ns, %d requests; want 200, 10, 6", w.RawFlight, w.CPU, w.Count)
	}
	// Requeue (a failed stream) gives every bound back.
	s.Requeue(w)
	if w.RawFlight != 0 || w.CPU != 0 || w.Count != 2 {
		t.Fatalf("after requeue: %d raw bytes, %d ns, %d requests; want 0, 0, 2 (the answered ones hold their slots)", w.RawFlight, w.CPU, w.Count)
	}
}

// TestScheduleOneLane: a plan of one kind keeps permutation order.
func TestScheduleOneLane(t *testing.T) {
	for _, off := range [][]bool{nil, {false, false, false}, {true, true, true}} {
		s := NewSchedule(3, 0, 1, off)
		if got := takeAll(t, s, testWindow(8)); !slices.Equal(got, []int{0, 1, 2}) {
			t.Errorf("offloaded %v: took %v, want [0 1 2]", off, got)
		}
	}
}

// TestScheduleHedgeDuplicate: a hedged position taken by a second window
// is accepted once; the late response of the other copy is dropped and
// reported as a duplicate, and no position is lost.
func TestScheduleHedgeDuplicate(t *testing.T) {
	s := NewSchedule(4, 0, 2, nil)
	w1, w2 := testWindow(2), testWindow(4)
	takeAll(t, s, w1) // positions 0 and 1 on the stalled stream
	if n := s.Hedge(w1); n != 2 {
		t.Fatalf("hedged %d, want 2", n)
	}
	if n := s.Hedge(w1); n != 0 {
		t.Fatalf("hedged %d again, want 0", n)
	}
	got := takeAll(t, s, w2)
	if len(got) != 4 || got[0] != 0 || got[1] != 1 {
		t.Fatalf("second window took %v, want the hedged 0 and 1 first, then 2 and 3", got)
	}
	// The replica answers position 0 first; the stalled stream then
	// answers it too.
	var tag0 uint64
	for tag, r := range w2.Outstanding {
		if r.Pos == 0 {
			tag0 = tag
		}
	}
	if r, dup := s.Claim(w2, tag0, 1); r == nil || dup {
		t.Fatalf("first response: %v %v", r, dup)
	}
	if r, dup := s.Claim(w1, 1, 1); r != nil || !dup { // tag 1 is position 0 on w1
		t.Fatalf("late response: %v %v, want a duplicate", r, dup)
	}
	// The stalled stream is cancelled: its other request (position 1) is
	// not put back twice, and position 0 not at all.
	if n := s.Requeue(w1); n != 1 || s.groups[0].retry.Len() != 0 {
		t.Fatalf("requeued %d, retry heap %v: want 1 dropped, nothing put back", n, s.groups[0].retry)
	}
	if w1.Count != 0 || w1.Bytes != 0 {
		t.Errorf("stalled window holds %d requests, %d bytes after requeue", w1.Count, w1.Bytes)
	}
}

// TestSchedulePrefer: under a preferred placement each window takes the
// positions bound to it first, in order; only when its own are all taken
// does it help with the other agent's, and a strict placement (Prefer
// false, round-robin) never lets it. Every position is taken once.
func TestSchedulePrefer(t *testing.T) {
	bound := []uint64{1, 2, 1, 1, 2, 2, 2, 2}
	for _, prefer := range []bool{true, false} {
		s := NewPlacedSchedule(len(bound), 0, 2, nil, Placement{Bound: bound, Prefer: prefer})
		w0, w1 := testWindow(8), testWindow(2)
		w0.Idx, w1.Idx = 0, 1
		got1 := takeAll(t, s, w1)
		if !slices.Equal(got1, []int{1, 4}) {
			t.Fatalf("prefer %v: agent 1 took %v, want [1 4]: its own, in order", prefer, got1)
		}
		got0 := takeAll(t, s, w0)
		want := []int{0, 2, 3}
		if prefer {
			want = []int{0, 2, 3, 5, 6, 7} // its own, then the rest of agent 1's
		}
		if !slices.Equal(got0, want) {
			t.Errorf("prefer %v: agent 0 took %v, want %v", prefer, got0, want)
		}
	}
}

// TestScheduleResplit: a plan that takes over a running epoch re-plans only
// the positions not yet taken: those move to the lanes of their new kind
// (two of each in a window of four), a requeued position keeps its lane,
// the window's lane counts stay consistent, and every position is taken
// exactly once.
func TestScheduleResplit(t *testing.T) {
	const n = 12
	s := NewSchedule(n, 0, 1, nil) // No-Off: one lane
	w := testWindow(4)
	first := takeAll(t, s, w)
	if !slices.Equal(first, []int{0, 1, 2, 3}) {
		t.Fatalf("took %v before the switch, want [0 1 2 3]", first)
	}
	// Position 1 fails transiently and is put back.
	var tag1 uint64
	for tag, r := range w.Outstanding {
		if r.Pos == 1 {
			tag1 = tag
		}
	}
	if !s.RetryTag(w, tag1, 3) {
		t.Fatal("retry refused")
	}
	var set []int
	left := s.Resplit(func(pos int) bool {
		set = append(set, pos)
		return pos%2 == 0
	}, func(received []bool) {
		if len(received) != n {
			t.Errorf("received %d flags, want %d", len(received), n)
		}
	})
	if left != n-4 || !slices.Equal(set, []int{4, 5, 6, 7, 8, 9, 10, 11}) {
		t.Fatalf("re-planned %d: %v, want the 8 positions never taken, in order", left, set)
	}
	seen := map[int]int{0: 1, 2: 1, 3: 1}
	for tag, r := range w.Outstanding {
		s.Release(w, r)
		delete(w.Outstanding, tag)
	}
	got := takeAll(t, s, w)
	if !slices.Equal(got, []int{1, 4, 5, 6}) {
		t.Fatalf("after the switch: %v, want the retry 1, then two of each lane: 4 5 6", got)
	}
	if w.laneCount[0] != 2 || w.laneCount[1] != 2 {
		t.Errorf("lane counts %v, want [2 2]", w.laneCount)
	}
	for len(got) > 0 {
		for _, p := range got {
			seen[p]++
		}
		for tag, r := range w.Outstanding {
			s.Release(w, r)
			delete(w.Outstanding, tag)
		}
		if w.Count != 0 || w.laneCount != [2]int{} {
			t.Fatalf("window %d requests, lanes %v after releasing all", w.Count, w.laneCount)
		}
		got = takeAll(t, s, w)
	}
	for p := range n {
		if seen[p] != 1 {
			t.Errorf("position %d taken %d times", p, seen[p])
		}
	}
}

// TestScheduleOrder: Order hands out each lane's positions in ascending
// key (a provisional plan's cheapest first), Resplit puts the rest back in
// permutation order, and with the strict-order gate it changes nothing.
func TestScheduleOrder(t *testing.T) {
	off := []bool{false, true, true, true, true, true}
	key := func(pos int) float64 { return float64(10 - pos) } // the last first
	s := NewSchedule(len(off), 0, 1, off)
	s.Order(key)
	w := testWindow(3)
	if got := takeAll(t, s, w); !slices.Equal(got, []int{0, 5, 4}) {
		t.Fatalf("first window %v, want [0 5 4]: the raw one, then the offloaded ones by key", got)
	}
	if n := s.Resplit(func(pos int) bool { return pos != 0 }, nil); n != 3 {
		t.Fatalf("resplit %d positions, want the 3 not taken", n)
	}
	for tag, r := range w.Outstanding {
		s.Release(w, r)
		delete(w.Outstanding, tag)
	}
	if got := takeAll(t, s, w); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("after Resplit: %v, want permutation order [1 2 3]", got)
	}
	g := NewSchedule(len(off), 4, 1, off)
	g.Order(key)
	if got := takeAll(t, g, testWindow(3)); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("with the gate: %v, want permutation order [0 1 2]", got)
	}
}
