package computeagent

import (
	"errors"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestPlacementAgents: two storage agents holding every sample, one with a
// link eighty times slower. Round-robin gives each exactly half the
// samples, whatever their speed; pull lets the fast one take most. Both
// deliver every sample exactly once, with the same tensors. NB: the links
// are this far apart so that the slow one's time, not this machine's CPU
// (finishing every sample here), decides how many it serves: with 20:1 a
// loaded machine narrowed pull's split to 39:25.
func TestPlacementAgents(t *testing.T) {
	run := func(placement string) (fast, slow int64, shas map[uint64][32]byte) {
		n := &enginetest.MemNet{}
		a, b := enginetest.NewStorage(t, "a"), enginetest.NewStorage(t, "b")
		b.LinkBPS = func(uint64) float64 { return 1 << 18 }
		a.LinkBPS = func(uint64) float64 { return 20 << 20 }
		n.Serve(t, "a:1", a)
		n.Serve(t, "b:1", b)
		cfg, rec := testConfig(t, n, "a:1", "b:1")
		cfg.Placement = placement
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkReport(t, reports[0])
		checkOnce(t, rec.epoch(0), allSamples())
		bs := reports[0].ByStorage
		if len(bs) != 2 || bs[0].Samples != a.Responses() || bs[1].Samples != b.Responses() {
			t.Errorf("by_storage %+v, the agents sent %d and %d", bs, a.Responses(), b.Responses())
		}
		return a.Responses(), b.Responses(), sampleSHAs(t, rec, 0)
	}
	fa, fb, rr := run(PlacementRoundRobin)
	if d := fa - fb; d < -1 || d > 1 || fa+fb != enginetest.Samples {
		t.Errorf("round-robin: fast agent served %d, slow %d; want half each of %d", fa, fb, enginetest.Samples)
	}
	pa, pb, pull := run(PlacementPull)
	if pa < pb+enginetest.Samples/4 || pa+pb != enginetest.Samples {
		t.Errorf("pull: fast agent served %d, slow %d; want the fast one to take at least a quarter of the samples more", pa, pb)
	}
	if !maps.Equal(rr, pull) {
		t.Error("tensors differ between the placements")
	}
	t.Logf("round-robin %d/%d, pull %d/%d", fa, fb, pa, pb)
}

// twoShards is the layout of the test catalog in two shards of 32.
func twoShards() []*dataplanepb.ShardRange {
	return []*dataplanepb.ShardRange{{First: 0, Count: 32, Name: "ids-0-31"}, {First: 32, Count: 32, Name: "ids-32-63"}}
}

// TestShardOwnerDies: two storage agents, the catalog in two shards, and
// one agent dies after a few responses. With each shard on both (R=2) the
// epoch completes exactly once from the survivor. With each shard on one
// (R=1) the dead agent's samples not yet delivered are reported
// UNAVAILABLE under skip (every sample is delivered once or reported,
// none dropped), and fail the epoch under fail.
func TestShardOwnerDies(t *testing.T) {
	run := func(replicas int, onError string) ([]report.EpochReport, []delivery, error) {
		n := &enginetest.MemNet{}
		a, b := enginetest.NewStorage(t, "a"), enginetest.NewStorage(t, "b")
		a.Layout, b.Layout = twoShards(), twoShards()
		if replicas == 2 {
			a.Held, b.Held = []uint32{0, 1}, []uint32{0, 1}
		} else {
			a.Held, b.Held = []uint32{0}, []uint32{1}
		}
		b.DieAt = 5
		n.Serve(t, "a:1", a)
		n.Serve(t, "b:1", b)
		cfg, rec := testConfig(t, n, "a:1", "b:1")
		cfg.OnError = onError
		cfg.RetryBudget = 300 * time.Millisecond
		reports, err := runAgent(t, cfg)
		return reports, rec.epoch(0), err
	}

	reports, got, err := run(2, OnErrorFail)
	if err != nil {
		t.Fatalf("R=2: %v", err)
	}
	checkReport(t, reports[0])
	checkOnce(t, got, allSamples())
	if bs := reports[0].ByStorage; len(bs) != 2 || bs[0].Shards != 2 || bs[1].Samples >= enginetest.Samples/2 {
		t.Errorf("R=2: by_storage %+v: want both holding both shards and b, dead after 4, short of half", bs)
	}

	reports, got, err = run(1, OnErrorSkip)
	if err != nil {
		t.Fatalf("R=1, skip: %v", err)
	}
	r := reports[0]
	seen := map[uint64]int{}
	for _, d := range got {
		seen[d.sample]++
	}
	for _, f := range r.Failed {
		if f.Kind != report.KindUnavailable || f.Sample < 32 {
			t.Errorf("failure %+v: want UNAVAILABLE samples of shard 1 (32-63) only", f)
		}
		seen[f.Sample]++
	}
	for _, s := range allSamples() {
		if seen[s] != 1 {
			t.Errorf("R=1, skip: sample %d delivered or reported %d times, want once", s, seen[s])
		}
	}
	if len(r.Failed) == 0 || r.Samples+r.SamplesFailed != enginetest.Samples {
		t.Errorf("R=1, skip: %d delivered and %d failed of %d: want some unavailable", r.Samples, r.SamplesFailed, enginetest.Samples)
	}

	if _, _, err = run(1, OnErrorFail); !errors.Is(err, ErrSample) || !strings.Contains(err.Error(), report.KindUnavailable) {
		t.Errorf("R=1, fail: %v, want the epoch failed naming an unavailable sample", err)
	}
}

// TestShardUnowned: a shard no storage agent holds at the epoch's start
// refuses the epoch under fail, and is reported sample by sample under
// skip.
func TestShardUnowned(t *testing.T) {
	run := func(onError string) ([]report.EpochReport, []delivery, error) {
		n := &enginetest.MemNet{}
		a := enginetest.NewStorage(t, "a")
		a.Layout, a.Held = twoShards(), []uint32{1}
		n.Serve(t, "a:1", a)
		cfg, rec := testConfig(t, n, "a:1")
		cfg.OnError = onError
		reports, err := runAgent(t, cfg)
		return reports, rec.epoch(0), err
	}
	if _, _, err := run(OnErrorFail); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("fail: %v, want ErrUnavailable", err)
	}
	reports, got, err := run(OnErrorSkip)
	if err != nil {
		t.Fatal(err)
	}
	checkOnce(t, got, allSamples()[32:])
	if f := reports[0].Failed; len(f) != 32 || f[0].Sample != 0 || f[0].Kind != report.KindUnavailable {
		t.Errorf("skip: %d failures (%+v...), want shard 0's 32 samples UNAVAILABLE", len(f), f[:min(len(f), 1)])
	}
}

// TestCutRefetched: cuts that do not decode here (damaged on purpose) are
// fetched again raw and finished from the raw bytes: no sample fails and
// the tensors are No-Off's.
func TestCutRefetched(t *testing.T) {
	p := enginetest.Pipeline(t)
	big := bigPhotos(t)
	run := func(plan *policy.Plan, bad bool) (report.EpochReport, map[uint64][32]byte) {
		n := &enginetest.MemNet{}
		s := enginetest.NewStorage(t, "s")
		s.Data = big
		if bad {
			s.BadCut = func(sample uint64) bool { return sample%2 == 0 }
		}
		n.Serve(t, "s:1", s)
		cfg, rec := testConfig(t, n, "s:1")
		cfg.Plan = plan
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkReport(t, reports[0])
		checkOnce(t, rec.epoch(0), allSamples())
		return reports[0], sampleSHAs(t, rec, 0)
	}
	_, want := run(planner.NoOff(), false)
	cut := planner.PlanOf("cut", p.ID(), ops.SplitCut, nil)
	r, got := run(cut, true)
	if !maps.Equal(got, want) {
		t.Error("tensors differ from No-Off's")
	}
	if ops.JPEGBackend == "libjpeg-turbo" && (r.Refetched == 0 || r.Refetched > enginetest.Samples/2) {
		t.Errorf("%d refetched, want some and at most the %d damaged", r.Refetched, enginetest.Samples/2)
	}
	t.Logf("refetched %d, by split %+v", r.Refetched, r.BySplit)
}
