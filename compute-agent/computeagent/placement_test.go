package computeagent

import (
	"maps"
	"slices"
	"testing"
)

func indexedWindow(idx, count int) *window {
	w := testWindow(count)
	w.idx = idx
	return w
}

// drain takes and claims everything w may take now, in order.
func drain(t *testing.T, s *schedule, w *window) []int {
	t.Helper()
	var got []int
	for {
		r, _, done := s.take(w, est)
		if done || r == nil {
			return got
		}
		if c, dup := s.claim(w, r.tag, 1); c == nil || dup {
			t.Fatalf("claim of position %d: %v %v", r.pos, c, dup)
		}
		s.release(w, r)
		got = append(got, r.pos)
	}
}

// TestPlacementRoundRobin: round-robin binds position p to agent p mod N:
// a fetcher never takes another's positions while that one is alive, even
// when it is idle; once the other gives up, its positions fall back to
// the agents still holding them, and none is orphaned.
func TestPlacementRoundRobin(t *testing.T) {
	e := &epochRun{cfg: &Config{Placement: PlacementRoundRobin}, order: []uint64{10, 11, 12, 13, 14, 15, 16}}
	fs := []*fetcher{{}, {}}
	pl, unowned, err := e.placement(fs)
	if err != nil || len(unowned) != 0 {
		t.Fatal(err, unowned)
	}
	s := newPlacedSchedule(len(e.order), 0, 2, nil, pl)
	w0, w1 := indexedWindow(0, 100), indexedWindow(1, 100)
	if got := drain(t, s, w0); !slices.Equal(got, []int{0, 2, 4, 6}) {
		t.Fatalf("agent 0 took %v, want the even positions only", got)
	}
	if alive, orphans := s.giveUp(w1); alive != 1 || len(orphans) != 0 {
		t.Fatalf("give up: %d alive, %d orphans; want 1 and 0 (the data is replicated)", alive, len(orphans))
	}
	if got := drain(t, s, w0); !slices.Equal(got, []int{1, 3, 5}) {
		t.Fatalf("after agent 1 gave up, agent 0 took %v, want the odd positions", got)
	}
	if !s.complete() {
		t.Fatal("schedule not complete")
	}
}

// TestPlacementPullSharded: with sharded data (each agent holds some
// samples), a fetcher takes only positions its agent holds, pulls them
// in permutation order, and a position both hold goes to whichever asks.
func TestPlacementPullSharded(t *testing.T) {
	e := &epochRun{cfg: &Config{Placement: PlacementPull}, order: []uint64{0, 1, 2, 3, 4, 5}}
	fs := []*fetcher{
		{holds: func(s uint64) bool { return s < 4 }},
		{holds: func(s uint64) bool { return s >= 2 }},
	}
	pl, unowned, err := e.placement(fs)
	if err != nil || len(unowned) != 0 {
		t.Fatal(err, unowned)
	}
	s := newPlacedSchedule(6, 0, 2, nil, pl)
	w0, w1 := indexedWindow(0, 100), indexedWindow(1, 100)
	if got := drain(t, s, w1); !slices.Equal(got, []int{2, 3, 4, 5}) {
		t.Fatalf("agent 1 took %v, want 2-5 (what it holds)", got)
	}
	if got := drain(t, s, w0); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("agent 0 took %v, want 0 and 1", got)
	}
}

// TestPlacementOrphans: when the only holder of some samples gives up,
// the positions it still owed (requeued from its stream) come back as
// orphans on its window, exactly once, and the rest go on.
func TestPlacementOrphans(t *testing.T) {
	e := &epochRun{cfg: &Config{}, order: []uint64{0, 1, 2, 3, 4, 5}}
	fs := []*fetcher{
		{holds: func(s uint64) bool { return s%2 == 0 }},
		{holds: func(s uint64) bool { return s%2 == 1 }},
	}
	pl, _, err := e.placement(fs)
	if err != nil {
		t.Fatal(err)
	}
	s := newPlacedSchedule(6, 0, 2, nil, pl)
	w0, w1 := indexedWindow(0, 100), indexedWindow(1, 2)
	// Agent 1 takes positions 1 and 3, receives 1, and its stream fails.
	r1, _, _ := s.take(w1, est)
	r3, _, _ := s.take(w1, est)
	if r1.pos != 1 || r3.pos != 3 {
		t.Fatalf("agent 1 took %d and %d, want 1 and 3", r1.pos, r3.pos)
	}
	s.claim(w1, r1.tag, 1)
	s.release(w1, r1)
	s.requeue(w1)
	alive, orphans := s.giveUp(w1)
	var pos []int
	for _, r := range orphans {
		pos = append(pos, r.pos)
	}
	slices.Sort(pos)
	if alive != 1 || !slices.Equal(pos, []int{3, 5}) {
		t.Fatalf("give up: %d alive, orphans %v; want 1 and [3 5]", alive, pos)
	}
	for _, r := range orphans {
		if c, _ := s.claim(w1, r.tag, 0); c == nil {
			t.Fatalf("orphan %d not claimable", r.pos)
		}
		s.release(w1, r)
	}
	if got := drain(t, s, w0); !slices.Equal(got, []int{0, 2, 4}) {
		t.Fatalf("agent 0 took %v, want its own 0, 2, 4", got)
	}
	if !s.complete() || w1.count != 0 {
		t.Fatalf("complete %v, dead window count %d", s.complete(), w1.count)
	}
}

// TestPlacementUnowned: samples nobody holds at the epoch's start are
// listed by placement and taken out of the schedule by unowned, so the
// epoch can report them instead of waiting for them forever.
func TestPlacementUnowned(t *testing.T) {
	e := &epochRun{cfg: &Config{}, order: []uint64{7, 8, 9}}
	fs := []*fetcher{{holds: func(s uint64) bool { return s != 8 }}}
	pl, unowned, err := e.placement(fs)
	if err != nil || !slices.Equal(unowned, []int{1}) {
		t.Fatalf("unowned %v (%v), want [1]", unowned, err)
	}
	s := newPlacedSchedule(3, 0, 1, nil, pl)
	w := indexedWindow(0, 10)
	orphans := s.unowned(w)
	if len(orphans) != 1 || orphans[0].pos != 1 {
		t.Fatalf("orphans %v, want position 1", orphans)
	}
	if got := drain(t, s, w); !slices.Equal(got, []int{0, 2}) {
		t.Fatalf("took %v, want 0 and 2", got)
	}
}

// TestPlacementPreference: a fetcher takes the positions that prefer it
// first, then any other it holds.
func TestPlacementPreference(t *testing.T) {
	pref := []uint64{2, 1, 2, 1}
	s := newPlacedSchedule(4, 0, 2, nil, placement{pref: pref})
	w0 := indexedWindow(0, 100)
	if got := drain(t, s, w0); !slices.Equal(got, []int{1, 3, 0, 2}) {
		t.Fatalf("took %v, want its preferred 1 and 3 first", got)
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

// TestPlacementAgents: two storage agents holding every sample, one with a
// link ten times slower. Round-robin gives each exactly half the samples,
// whatever their speed; pull lets the fast one take most. Both deliver
// every sample exactly once, with the same tensors.
func TestPlacementAgents(t *testing.T) {
	run := func(placement string) (fast, slow int64, shas map[uint64][32]byte) {
		n := &memNet{}
		a, b := newFake(t, "a"), newFake(t, "b")
		b.linkBPS = func(uint64) float64 { return 1 << 20 }
		a.linkBPS = func(uint64) float64 { return 20 << 20 }
		n.serve(t, "a:1", a)
		n.serve(t, "b:1", b)
		cfg, rec := testConfig(t, n, "a:1", "b:1")
		cfg.Placement = placement
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkReport(t, reports[0])
		checkOnce(t, rec.epoch(0), allSamples())
		bs := reports[0].ByStorage
		if len(bs) != 2 || bs[0].Samples != a.responses.Load() || bs[1].Samples != b.responses.Load() {
			t.Errorf("by_storage %+v, the agents sent %d and %d", bs, a.responses.Load(), b.responses.Load())
		}
		return a.responses.Load(), b.responses.Load(), sampleSHAs(t, rec, 0)
	}
	fa, fb, rr := run(PlacementRoundRobin)
	if d := fa - fb; d < -1 || d > 1 || fa+fb != testSamples {
		t.Errorf("round-robin: fast agent served %d, slow %d; want half each of %d", fa, fb, testSamples)
	}
	pa, pb, pull := run(PlacementPull)
	if pa < pb+testSamples/4 || pa+pb != testSamples {
		t.Errorf("pull: fast agent served %d, slow %d; want the fast one to take at least a quarter of the samples more", pa, pb)
	}
	if !maps.Equal(rr, pull) {
		t.Error("tensors differ between the placements")
	}
	t.Logf("round-robin %d/%d, pull %d/%d", fa, fb, pa, pb)
}
