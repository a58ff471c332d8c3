package catalog

import (
	"errors"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/compute-agent/schedule"
	shards "github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

func testWindow(count int) *schedule.Window {
	return &schedule.Window{MaxCount: count, MaxBytes: 1 << 30, Outstanding: map[uint64]*schedule.Request{}}
}

func est(pos int) (int64, uint64, int) { return 1, uint64(pos), 0 }

func indexedWindow(idx, count int) *schedule.Window {
	w := testWindow(count)
	w.Idx = idx
	return w
}

// drain takes and claims everything w may take now, in order.
func drain(t *testing.T, s *schedule.Schedule, w *schedule.Window) []int {
	t.Helper()
	var got []int
	for {
		r, _, done := s.Take(w, est)
		if done || r == nil {
			return got
		}
		if c, dup := s.Claim(w, r.Tag, 1); c == nil || dup {
			t.Fatalf("claim of position %d: %v %v", r.Pos, c, dup)
		}
		s.Release(w, r)
		got = append(got, r.Pos)
	}
}

// TestPlaceRoundRobin: round-robin binds position p to agent p mod N:
// a fetcher never takes another's positions while that one is alive, even
// when it is idle; once the other gives up, its positions fall back to
// the agents still holding them, and none is orphaned.
func TestPlaceRoundRobin(t *testing.T) {
	order := []uint64{10, 11, 12, 13, 14, 15, 16}
	pl, unowned := Place(order, make([]func(uint64) bool, 2), true, nil, nil)
	if len(unowned) != 0 {
		t.Fatal(unowned)
	}
	s := schedule.NewPlacedSchedule(len(order), 0, 2, nil, pl)
	w0, w1 := indexedWindow(0, 100), indexedWindow(1, 100)
	if got := drain(t, s, w0); !slices.Equal(got, []int{0, 2, 4, 6}) {
		t.Fatalf("agent 0 took %v, want the even positions only", got)
	}
	if alive, orphans := s.GiveUp(w1); alive != 1 || len(orphans) != 0 {
		t.Fatalf("give up: %d alive, %d orphans; want 1 and 0 (the data is replicated)", alive, len(orphans))
	}
	if got := drain(t, s, w0); !slices.Equal(got, []int{1, 3, 5}) {
		t.Fatalf("after agent 1 gave up, agent 0 took %v, want the odd positions", got)
	}
	if !s.Complete() {
		t.Fatal("schedule not complete")
	}
}

// TestPlacePullSharded: with sharded data (each agent holds some
// samples), a fetcher takes only positions its agent holds, pulls them
// in permutation order, and a position both hold goes to whichever asks.
func TestPlacePullSharded(t *testing.T) {
	order := []uint64{0, 1, 2, 3, 4, 5}
	fs := []func(uint64) bool{
		func(s uint64) bool { return s < 4 },
		func(s uint64) bool { return s >= 2 },
	}
	pl, unowned := Place(order, fs, false, nil, nil)
	if len(unowned) != 0 {
		t.Fatal(unowned)
	}
	s := schedule.NewPlacedSchedule(6, 0, 2, nil, pl)
	w0, w1 := indexedWindow(0, 100), indexedWindow(1, 100)
	if got := drain(t, s, w1); !slices.Equal(got, []int{2, 3, 4, 5}) {
		t.Fatalf("agent 1 took %v, want 2-5 (what it holds)", got)
	}
	if got := drain(t, s, w0); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("agent 0 took %v, want 0 and 1", got)
	}
}

// TestPlaceOrphans: when the only holder of some samples gives up,
// the positions it still owed (requeued from its stream) come back as
// orphans on its window, exactly once, and the rest go on.
func TestPlaceOrphans(t *testing.T) {
	order := []uint64{0, 1, 2, 3, 4, 5}
	fs := []func(uint64) bool{
		func(s uint64) bool { return s%2 == 0 },
		func(s uint64) bool { return s%2 == 1 },
	}
	pl, _ := Place(order, fs, false, nil, nil)
	s := schedule.NewPlacedSchedule(6, 0, 2, nil, pl)
	w0, w1 := indexedWindow(0, 100), indexedWindow(1, 2)
	// Agent 1 takes positions 1 and 3, receives 1, and its stream fails.
	r1, _, _ := s.Take(w1, est)
	r3, _, _ := s.Take(w1, est)
	if r1.Pos != 1 || r3.Pos != 3 {
		t.Fatalf("agent 1 took %d and %d, want 1 and 3", r1.Pos, r3.Pos)
	}
	s.Claim(w1, r1.Tag, 1)
	s.Release(w1, r1)
	s.Requeue(w1)
	alive, orphans := s.GiveUp(w1)
	var pos []int
	for _, r := range orphans {
		pos = append(pos, r.Pos)
	}
	slices.Sort(pos)
	if alive != 1 || !slices.Equal(pos, []int{3, 5}) {
		t.Fatalf("give up: %d alive, orphans %v; want 1 and [3 5]", alive, pos)
	}
	for _, r := range orphans {
		if c, _ := s.Claim(w1, r.Tag, 0); c == nil {
			t.Fatalf("orphan %d not claimable", r.Pos)
		}
		s.Release(w1, r)
	}
	if got := drain(t, s, w0); !slices.Equal(got, []int{0, 2, 4}) {
		t.Fatalf("agent 0 took %v, want its own 0, 2, 4", got)
	}
	if !s.Complete() || w1.Count != 0 {
		t.Fatalf("complete %v, dead window count %d", s.Complete(), w1.Count)
	}
}

// TestPlaceUnowned: samples nobody holds at the epoch's start are
// listed by placement and taken out of the schedule by unowned, so the
// epoch can report them instead of waiting for them forever.
func TestPlaceUnowned(t *testing.T) {
	order := []uint64{7, 8, 9}
	fs := []func(uint64) bool{func(s uint64) bool { return s != 8 }}
	pl, unowned := Place(order, fs, false, nil, nil)
	if !slices.Equal(unowned, []int{1}) {
		t.Fatalf("unowned %v, want [1]", unowned)
	}
	s := schedule.NewPlacedSchedule(3, 0, 1, nil, pl)
	w := indexedWindow(0, 10)
	orphans := s.Unowned(w)
	if len(orphans) != 1 || orphans[0].Pos != 1 {
		t.Fatalf("orphans %v, want position 1", orphans)
	}
	if got := drain(t, s, w); !slices.Equal(got, []int{0, 2}) {
		t.Fatalf("took %v, want 0 and 2", got)
	}
}

func TestNthBit(t *testing.T) {
	for _, c := range []struct {
		m    uint64
		n    int
		want uint64
	}{{0b1011, 0, 0b1}, {0b1011, 1, 0b10}, {0b1011, 2, 0b1000}, {1 << 63, 0, 1 << 63}} {
		if got := nthBit(c.m, c.n); got != c.want {
			t.Errorf("nthBit(%b, %d) = %b, want %b", c.m, c.n, got, c.want)
		}
	}
}

// twoShards is the layout of the test catalog in two shards of 32.
func twoShards() []*dataplanepb.ShardRange {
	return []*dataplanepb.ShardRange{{First: 0, Count: 32, Name: "ids-0-31"}, {First: 32, Count: 32, Name: "ids-32-63"}}
}

// TestAnnounceRefused: an agent whose announced layout is not one (a gap)
// is refused, not trusted.
func TestAnnounceRefused(t *testing.T) {
	info := &dataplanepb.InfoResponse{Samples: 64, Layout: []*dataplanepb.ShardRange{{First: 0, Count: 30}, {First: 32, Count: 32}}}
	if _, err := Announce("x", info, &Catalog{Total: 64}); err == nil {
		t.Fatal("a layout with a gap was accepted")
	}
	info = &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: []uint32{1, 0}}
	if _, err := Announce("x", info, &Catalog{Total: 64}); err == nil {
		t.Fatal("held shards out of order were accepted")
	}
	info = &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: []uint32{1}}
	if h, err := Announce("x", info, &Catalog{Total: 64}); err != nil || h.HoldsFunc() == nil || h.Holds(3) || !h.Holds(40) || h.Shards() != 1 {
		t.Fatalf("a good announcement: %v, shards %d", err, h.Shards())
	}
}

// TestReplace: shards none of the reachable agents announced go to them by
// rendezvous hashing over their names, as the agents will place them once
// gossip has declared the missing holders dead; nothing moves when the
// agents disagree on the replica count.
func TestReplace(t *testing.T) {
	mk := func(name string, replicas int, held ...uint32) *Holdings {
		info := &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: held, PlacementName: name, Replicas: uint32(replicas)}
		h, err := Announce(name, info, &Catalog{Total: 64})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b := mk("a", 1), mk("b", 1, 1) // shard 0's holder is gone
	if n := Replace([]*Holdings{a, b}); n != 1 {
		t.Fatalf("placed %d shards, want 1", n)
	}
	owner := shards.Owners(0, []string{"a", "b"}, 1)[0]
	for _, h := range []*Holdings{a, b} {
		if got, want := h.HoldsFunc() != nil && h.Holds(3), h.name == owner; got != want {
			t.Errorf("%s holds sample 3: %v, want %v (rendezvous owner %s)", h.name, got, want, owner)
		}
	}
	if !b.Holds(40) {
		t.Error("b lost shard 1")
	}
	c, d := mk("c", 1), mk("d", 2, 1)
	if n := Replace([]*Holdings{c, d}); n != 0 || c.HoldsFunc() != nil && c.Holds(3) {
		t.Errorf("replica counts differ: placed %d, want none", n)
	}
}

// TestReplaceStored: re-placement gives a shard only to the agents that
// store it (agents started from a manifest with part of the files), and
// leaves a shard nobody reachable stores unplaced, its samples unowned.
func TestReplaceStored(t *testing.T) {
	mk := func(name string, held, missing []uint32) *Holdings {
		info := &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: held, MissingShards: missing, PlacementName: name, Replicas: 1}
		h, err := Announce(name, info, &Catalog{Total: 64})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// Shard 0's holder is gone; of the survivors only b stores it.
	for _, order := range [][2]string{{"a", "b"}, {"b", "a"}} {
		a, b := mk(order[0], nil, []uint32{0}), mk(order[1], []uint32{1}, nil)
		if n := Replace([]*Holdings{a, b}); n != 1 {
			t.Fatalf("placed %d shards, want 1", n)
		}
		if a.HoldsFunc() != nil && a.Holds(3) {
			t.Errorf("%s, which does not store shard 0, was given it", a.name)
		}
		if b.HoldsFunc() != nil && !b.Holds(3) {
			t.Errorf("%s stores shard 0 but was not given it", b.name)
		}
	}
	// Nobody reachable stores shard 0: it stays unplaced.
	a, b := mk("a", nil, []uint32{0}), mk("b", []uint32{1}, []uint32{0})
	if n := Replace([]*Holdings{a, b}); n != 0 {
		t.Errorf("placed %d shards that nobody stores, want 0", n)
	}
	if a.Holds(3) || b.Holds(3) {
		t.Error("a shard nobody stores was given to an agent")
	}
	// An announcement whose missing shards overlap its held ones is refused.
	bad := &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: []uint32{0}, MissingShards: []uint32{0}, PlacementName: "x", Replicas: 1}
	if _, err := Announce("x", bad, &Catalog{Total: 64}); !errors.Is(err, shards.ErrHeld) {
		t.Errorf("held and missing shard 0: %v, want ErrHeld", err)
	}
}

// TestPlacePlanned: a cluster plan's replica is a preference: each
// fetcher takes the positions the plan gave its agent (by name) first, in
// order, and then helps with the rest of the other's, so no agent idles
// while work is left; a sample the plan does not list goes to either.
func TestPlacePlanned(t *testing.T) {
	chosen := map[uint64]string{10: "b", 11: "a", 12: "b", 13: "b", 14: "a"} // 15: none
	replica := func(s uint64) (string, bool) { name, ok := chosen[s]; return name, ok }
	order := []uint64{10, 11, 12, 13, 14, 15}
	// The agents in another order than the plan's cluster: bound by name.
	names := []string{"b", "a"}
	pl, _ := Place(order, make([]func(uint64) bool, 2), false, names, replica)
	if !pl.Prefer || !slices.Equal(pl.Bound, []uint64{1, 2, 1, 1, 2, 0}) {
		t.Fatalf("placement %+v: want positions bound to b (bit 0) and a (bit 1) by the plan, preferred", pl)
	}
	s := schedule.NewPlacedSchedule(len(order), 0, 2, nil, pl)
	// b's window holds three: they are its own.
	wb, wa := indexedWindow(0, 3), indexedWindow(1, 100)
	var got []int
	for r, _, _ := s.Take(wb, est); r != nil; r, _, _ = s.Take(wb, est) {
		got = append(got, r.Pos)
	}
	if !slices.Equal(got, []int{0, 2, 3}) {
		t.Fatalf("b took %v, want its own (0, 2, 3) first", got)
	}
	if got := drain(t, s, wa); !slices.Equal(got, []int{1, 4, 5}) {
		t.Fatalf("a took %v, want its own (1, 4) and the unlisted 5, not b's in flight", got)
	}
	// An agent ahead of the plan helps: a alone takes its own and the
	// unlisted first, then b's.
	s = schedule.NewPlacedSchedule(len(order), 0, 2, nil, pl)
	if got := drain(t, s, indexedWindow(1, 100)); !slices.Equal(got, []int{1, 4, 5, 0, 2, 3}) {
		t.Fatalf("a alone took %v, want 1 4 5 then 0 2 3", got)
	}
	// A plan that names no replica (pooled resources), or no plan: plain
	// pull.
	none := func(uint64) (string, bool) { return "", false }
	for _, r := range []func(uint64) (string, bool){none, nil} {
		if pl, _ := Place(order, make([]func(uint64) bool, 2), false, names, r); pl.Bound != nil {
			t.Errorf("no replicas: bound %v", pl.Bound)
		}
	}
}
