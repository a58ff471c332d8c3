package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	shards "github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/policy"
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

// TestPlacementRoundRobin: round-robin binds position p to agent p mod N:
// a fetcher never takes another's positions while that one is alive, even
// when it is idle; once the other gives up, its positions fall back to
// the agents still holding them, and none is orphaned.
func TestPlacementRoundRobin(t *testing.T) {
	e := &Epoch{cfg: &Config{RoundRobin: true}, order: []uint64{10, 11, 12, 13, 14, 15, 16}}
	fs := []*Fetcher{{}, {}}
	pl, unowned, err := e.placement(fs)
	if err != nil || len(unowned) != 0 {
		t.Fatal(err, unowned)
	}
	s := schedule.NewPlacedSchedule(len(e.order), 0, 2, nil, pl)
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

// TestPlacementPullSharded: with sharded data (each agent holds some
// samples), a fetcher takes only positions its agent holds, pulls them
// in permutation order, and a position both hold goes to whichever asks.
func TestPlacementPullSharded(t *testing.T) {
	e := &Epoch{cfg: &Config{}, order: []uint64{0, 1, 2, 3, 4, 5}}
	fs := []*Fetcher{
		{holds: func(s uint64) bool { return s < 4 }},
		{holds: func(s uint64) bool { return s >= 2 }},
	}
	pl, unowned, err := e.placement(fs)
	if err != nil || len(unowned) != 0 {
		t.Fatal(err, unowned)
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

// TestPlacementOrphans: when the only holder of some samples gives up,
// the positions it still owed (requeued from its stream) come back as
// orphans on its window, exactly once, and the rest go on.
func TestPlacementOrphans(t *testing.T) {
	e := &Epoch{cfg: &Config{}, order: []uint64{0, 1, 2, 3, 4, 5}}
	fs := []*Fetcher{
		{holds: func(s uint64) bool { return s%2 == 0 }},
		{holds: func(s uint64) bool { return s%2 == 1 }},
	}
	pl, _, err := e.placement(fs)
	if err != nil {
		t.Fatal(err)
	}
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

// TestPlacementUnowned: samples nobody holds at the epoch's start are
// listed by placement and taken out of the schedule by unowned, so the
// epoch can report them instead of waiting for them forever.
func TestPlacementUnowned(t *testing.T) {
	e := &Epoch{cfg: &Config{}, order: []uint64{7, 8, 9}}
	fs := []*Fetcher{{holds: func(s uint64) bool { return s != 8 }}}
	pl, unowned, err := e.placement(fs)
	if err != nil || !slices.Equal(unowned, []int{1}) {
		t.Fatalf("unowned %v (%v), want [1]", unowned, err)
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

// TestAnnouncedRefused: an agent whose announced layout is not one (a gap)
// is refused, not trusted.
func TestAnnouncedRefused(t *testing.T) {
	f := &Fetcher{name: "x"}
	info := &dataplanepb.InfoResponse{Samples: 64, Layout: []*dataplanepb.ShardRange{{First: 0, Count: 30}, {First: 32, Count: 32}}}
	if err := f.announced(info, &Catalog{Total: 64}); err == nil {
		t.Fatal("a layout with a gap was accepted")
	}
	info = &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: []uint32{1, 0}}
	if err := f.announced(info, &Catalog{Total: 64}); err == nil {
		t.Fatal("held shards out of order were accepted")
	}
	info = &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: []uint32{1}}
	if err := f.announced(info, &Catalog{Total: 64}); err != nil || f.holds == nil || f.holds(3) || !f.holds(40) || f.shards != 1 {
		t.Fatalf("a good announcement: %v, shards %d", err, f.shards)
	}
}

// TestScheduleCPUCap: a window whose storage CPU estimate is full takes
// raw positions past the offloaded ones it cannot queue, and offloads
// again once an offload is answered or released.
func TestScheduleCPUCap(t *testing.T) {
	off := []bool{true, true, true, true, false, false, false, false}
	s := schedule.NewSchedule(len(off), 0, 1, off)
	s.CPUOf = func(pos, k int) int64 { return 10 }
	w := testWindow(8)
	w.MaxCPU = 20
	estOff := func(pos int) (int64, uint64, int) {
		k := 0
		if off[pos] {
			k = 1
		}
		return 1, uint64(pos), k
	}
	var got []int
	for {
		r, _, done := s.Take(w, estOff)
		if done || r == nil {
			break
		}
		got = append(got, r.Pos)
	}
	if !slices.Equal(got, []int{0, 1, 4, 5, 6, 7}) || w.CPU != 20 {
		t.Fatalf("took %v with %d ns of CPU, want the offloads 0 and 1 (20 ns), then the raw ones", got, w.CPU)
	}
	for _, r := range w.Outstanding {
		if r.Pos == 0 {
			s.Release(w, r)
			delete(w.Outstanding, r.Tag)
		}
	}
	if r, _, _ := s.Take(w, estOff); r == nil || r.Pos != 2 || w.CPU != 20 {
		t.Fatalf("after releasing an offload: took %v, want position 2", r)
	}
	// An answered offload's CPU leaves the window at once, before its
	// worker releases it (its slot and bytes stay held until then).
	var tag uint64
	for _, r := range w.Outstanding {
		if r.Pos == 1 {
			tag = r.Tag
		}
	}
	count := w.Count
	if r, _ := s.Claim(w, tag, 1); r == nil || w.CPU != 10 || w.Count != count {
		t.Fatalf("after the answer to position 1: %d ns of CPU and %d requests held, want 10 and %d", w.CPU, w.Count, count)
	}
	if r, _, _ := s.Take(w, estOff); r == nil || r.Pos != 3 || w.CPU != 20 {
		t.Fatalf("after an answered offload: took %v, want position 3", r)
	}
}

// infoOnly answers Info with a fixed process CPU.
type infoOnly struct {
	dataplanepb.StorageClient
	cpu uint64
	err error
}

func (c infoOnly) Info(context.Context, *dataplanepb.InfoRequest, ...grpc.CallOption) (*dataplanepb.InfoResponse, error) {
	return &dataplanepb.InfoResponse{ProcessCpuNs: c.cpu}, c.err
}

// TestTransport: the storage CPU per byte beyond the ops is the agents'
// process CPU over the epoch less their ops' CPU, over the bytes they
// sent; agents without the figure, or that do not answer, are left out.
func TestTransport(t *testing.T) {
	mk := func(cpu0, cpu1 uint64, ops, bytes int64, err error) *Fetcher {
		f := &Fetcher{client: infoOnly{cpu: cpu1, err: err}, cpu0: cpu0}
		f.opsNS.Store(ops)
		f.servedBytes.Store(bytes)
		return f
	}
	fs := []*Fetcher{
		mk(1e9, 1e9+30e6, 10e6, 2<<20, nil), // 20 ms for 2 MiB
		mk(5e8, 5e8+10e6, 0, 2<<20, nil),    // 10 ms for 2 MiB
		mk(0, 9e9, 0, 2<<20, nil),           // no figure at the start
		mk(1e9, 2e9, 0, 2<<20, errors.New("gone")),
	}
	want := 30e6 / float64(4<<20)
	if got := transport(context.Background(), fs); got < want*0.999 || got > want*1.001 {
		t.Fatalf("transport %v ns/B, want %v", got, want)
	}
	if got := transport(context.Background(), []*Fetcher{mk(1, 1e6, 0, 1000, nil)}); got != 0 {
		t.Fatalf("transport %v from 1000 bytes, want 0 (too few)", got)
	}
}

// TestPace: with several storage agents a fetcher's window bytes follow
// what its agent delivers: paceTime of its measured rate, at least four
// average responses, at most Config.WindowBytes; before its 8th response,
// and with one agent, the window is left alone.
func TestPace(t *testing.T) {
	cfg := &Config{WindowBytes: 64 << 20}
	e := &Epoch{cfg: cfg, paced: true}
	e.sched = schedule.NewSchedule(1, 0, 1, nil)
	f := &Fetcher{e: e, w: schedule.Window{MaxBytes: cfg.WindowBytes}}
	t0 := time.Unix(100, 0)
	f.pace(t0) // the first response starts the clock
	f.served.Store(4)
	f.servedBytes.Store(4 << 20)
	f.pace(t0.Add(time.Second))
	if f.w.MaxBytes != cfg.WindowBytes {
		t.Fatalf("after 4 responses: %d bytes, want the window untouched", f.w.MaxBytes)
	}
	f.served.Store(100)
	f.servedBytes.Store(10 << 20) // 10 MiB in 1 s, 100 KiB each
	f.pace(t0.Add(time.Second))
	if want := int64(float64(10<<20) * paceTime.Seconds()); f.w.MaxBytes != want {
		t.Errorf("at 10 MiB/s: %d bytes, want %d (paceTime of it)", f.w.MaxBytes, want)
	}
	f.pace(t0.Add(100 * time.Second)) // 0.1 MiB/s: the floor of 4 responses
	if want := int64(4 * (10 << 20) / 100); f.w.MaxBytes != want {
		t.Errorf("at 0.1 MiB/s: %d bytes, want the floor %d", f.w.MaxBytes, want)
	}
	f.servedBytes.Store(10 << 30) // 10 GiB in 1 s: the ceiling
	f.pace(t0.Add(time.Second))
	if f.w.MaxBytes != cfg.WindowBytes {
		t.Errorf("at 10 GiB/s: %d bytes, want the ceiling %d", f.w.MaxBytes, cfg.WindowBytes)
	}
	one := &Fetcher{e: &Epoch{cfg: cfg}, w: schedule.Window{MaxBytes: 7}}
	one.served.Store(100)
	one.servedBytes.Store(100)
	one.pace(t0)
	one.pace(t0.Add(time.Second))
	if one.w.MaxBytes != 7 {
		t.Errorf("one agent: window bytes %d, want untouched", one.w.MaxBytes)
	}
}

// TestReplace: shards none of the reachable agents announced go to them by
// rendezvous hashing over their names, as the agents will place them once
// gossip has declared the missing holders dead; nothing moves when the
// agents disagree on the replica count.
func TestReplace(t *testing.T) {
	mk := func(name string, replicas int, held ...uint32) *Fetcher {
		f := &Fetcher{name: name}
		info := &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: held, PlacementName: name, Replicas: uint32(replicas)}
		if err := f.announced(info, &Catalog{Total: 64}); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := mk("a", 1), mk("b", 1, 1) // shard 0's holder is gone
	if n := replace([]*Fetcher{a, b}); n != 1 {
		t.Fatalf("placed %d shards, want 1", n)
	}
	owner := shards.Owners(0, []string{"a", "b"}, 1)[0]
	for _, f := range []*Fetcher{a, b} {
		if got, want := f.holds != nil && f.holds(3), f.name == owner; got != want {
			t.Errorf("%s holds sample 3: %v, want %v (rendezvous owner %s)", f.name, got, want, owner)
		}
	}
	if !b.holds(40) {
		t.Error("b lost shard 1")
	}
	c, d := mk("c", 1), mk("d", 2, 1)
	if n := replace([]*Fetcher{c, d}); n != 0 || c.holds != nil && c.holds(3) {
		t.Errorf("replica counts differ: placed %d, want none", n)
	}
}

// TestReplaceStored: re-placement gives a shard only to the agents that
// store it (agents started from a manifest with part of the files), and
// leaves a shard nobody reachable stores unplaced, its samples unowned.
func TestReplaceStored(t *testing.T) {
	mk := func(name string, held, missing []uint32) *Fetcher {
		f := &Fetcher{name: name}
		info := &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: held, MissingShards: missing, PlacementName: name, Replicas: 1}
		if err := f.announced(info, &Catalog{Total: 64}); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// Shard 0's holder is gone; of the survivors only b stores it.
	for _, order := range [][2]string{{"a", "b"}, {"b", "a"}} {
		a, b := mk(order[0], nil, []uint32{0}), mk(order[1], []uint32{1}, nil)
		if n := replace([]*Fetcher{a, b}); n != 1 {
			t.Fatalf("placed %d shards, want 1", n)
		}
		if a.holds != nil && a.holds(3) {
			t.Errorf("%s, which does not store shard 0, was given it", a.name)
		}
		if b.holds != nil && !b.holds(3) {
			t.Errorf("%s stores shard 0 but was not given it", b.name)
		}
	}
	// Nobody reachable stores shard 0: it stays unplaced.
	a, b := mk("a", nil, []uint32{0}), mk("b", []uint32{1}, []uint32{0})
	if n := replace([]*Fetcher{a, b}); n != 0 {
		t.Errorf("placed %d shards that nobody stores, want 0", n)
	}
	if a.holds(3) || b.holds(3) {
		t.Error("a shard nobody stores was given to an agent")
	}
	// An announcement whose missing shards overlap its held ones is refused.
	f := &Fetcher{name: "x"}
	bad := &dataplanepb.InfoResponse{Samples: 64, Layout: twoShards(), HeldShards: []uint32{0}, MissingShards: []uint32{0}, PlacementName: "x", Replicas: 1}
	if err := f.announced(bad, &Catalog{Total: 64}); !errors.Is(err, shards.ErrHeld) {
		t.Errorf("held and missing shard 0: %v, want ErrHeld", err)
	}
}

// TestPlacementPlanned: a cluster plan's replica is a preference: each
// fetcher takes the positions the plan gave its agent (by name) first, in
// order, and then helps with the rest of the other's, so no agent idles
// while work is left; a sample the plan does not list goes to either.
func TestPlacementPlanned(t *testing.T) {
	plan := &policy.Plan{Policy: policy.NameOptimal, IDs: []uint64{10, 11, 12, 13, 14}, Split: make([]int, 5), Replica: []int16{1, 0, 1, 1, 0}}
	c := &policy.Cluster{Storage: []policy.StorageNode{{Name: "a"}, {Name: "b"}}}
	e := &Epoch{cfg: &Config{}, order: []uint64{10, 11, 12, 13, 14, 15}}
	var p Plan = planner.NewRunPlan(plan, nil, policy.Resources{}).On(c)
	e.plan.Store(&p)
	// The fetchers in another order than the cluster's: bound by name.
	fs := []*Fetcher{{name: "b"}, {name: "a"}}
	pl, _, err := e.placement(fs)
	if err != nil {
		t.Fatal(err)
	}
	if !pl.Prefer || !slices.Equal(pl.Bound, []uint64{1, 2, 1, 1, 2, 0}) {
		t.Fatalf("placement %+v: want positions bound to b (bit 0) and a (bit 1) by the plan, preferred", pl)
	}
	s := schedule.NewPlacedSchedule(len(e.order), 0, 2, nil, pl)
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
	s = schedule.NewPlacedSchedule(len(e.order), 0, 2, nil, pl)
	if got := drain(t, s, indexedWindow(1, 100)); !slices.Equal(got, []int{1, 4, 5, 0, 2, 3}) {
		t.Fatalf("a alone took %v, want 1 4 5 then 0 2 3", got)
	}
	// Without a cluster the plan names no replica: plain pull.
	var pooled Plan = planner.NewRunPlan(plan, nil, policy.Resources{})
	e.plan.Store(&pooled)
	if pl, _, _ := e.placement(fs); pl.Bound != nil {
		t.Errorf("pooled plan bound %v", pl.Bound)
	}
}
