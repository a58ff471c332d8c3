package computeagent

import (
	"slices"
	"testing"
)

func testWindow(count int) *window {
	return &window{maxCount: count, maxBytes: 1 << 30, outstanding: map[uint64]*request{}}
}

func est(pos int) (int64, uint64, int) { return 1, uint64(pos), 0 }

// takeAll takes positions until the window is full.
func takeAll(t *testing.T, s *schedule, w *window) []int {
	t.Helper()
	var got []int
	for {
		r, _, done := s.take(w, est)
		if done || r == nil {
			return got
		}
		got = append(got, r.pos)
	}
}

// TestScheduleLanes: with raw and offloaded positions mixed, a window holds
// at most half its count of each kind, each kind in permutation order, so
// the link and the storage CPU both have work; once one kind is used up the
// other gets the whole window; every position is taken exactly once.
func TestScheduleLanes(t *testing.T) {
	off := []bool{true, true, true, true, false, false, false, false, true, false}
	s := newSchedule(len(off), 0, 1, off)
	w := testWindow(4)
	if got := takeAll(t, s, w); !slices.Equal(got, []int{0, 1, 4, 5}) {
		t.Fatalf("first window %v, want [0 1 4 5]: two of each kind", got)
	}
	// Raw ones complete first (the link is quick): more raw ones go out,
	// not the offloaded position 2 beyond the offloaded half.
	for _, r := range w.outstanding {
		if !off[r.pos] {
			s.release(w, r)
			delete(w.outstanding, r.tag)
		}
	}
	if got := takeAll(t, s, w); !slices.Equal(got, []int{6, 7}) {
		t.Fatalf("after the raw ones: %v, want [6 7]", got)
	}
	// Drain: every position exactly once.
	seen := map[int]int{0: 1, 1: 1, 4: 1, 5: 1, 6: 1, 7: 1}
	for len(seen) < len(off) {
		for tag, r := range w.outstanding {
			s.release(w, r)
			delete(w.outstanding, tag)
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
	if w.laneCount[0]+w.laneCount[1] != w.count {
		t.Errorf("lane counts %v, count %d", w.laneCount, w.count)
	}
}

// TestScheduleOneLane: a plan of one kind keeps permutation order.
func TestScheduleOneLane(t *testing.T) {
	for _, off := range [][]bool{nil, {false, false, false}, {true, true, true}} {
		s := newSchedule(3, 0, 1, off)
		if got := takeAll(t, s, testWindow(8)); !slices.Equal(got, []int{0, 1, 2}) {
			t.Errorf("offloaded %v: took %v, want [0 1 2]", off, got)
		}
	}
}
