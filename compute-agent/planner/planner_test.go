package planner

import (
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/planner/stage1"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/cacheplan"
	"github.com/sophon-dl/sophon/policy/synthetic"
	"github.com/sophon-dl/sophon/profiler"
)

// TestStorageCalibration: a planned epoch whose offloaded samples used 10%
// more storage CPU than planned re-plans with the storage speed ratio
// corrected, although 10% is under the 20% drift threshold; 3% does not.
func TestStorageCalibration(t *testing.T) {
	for _, tc := range []struct {
		got     float64 // measured / planned storage CPU
		replan  bool
		wantSpd float64
	}{
		{1.10, true, 0.8 / 1.10},
		{0.90, true, 0.8 / 0.90},
		{1.03, false, 0.8},
	} {
		pl := &Planner{Threshold: 0.2, Name: policy.NameSOPHON, Res: policy.Resources{LinkBytesPerSec: 1e6, StorageSpeed: 0.8}}
		ran := policy.Plan{Pred: policy.Prediction{Seconds: 2, StorageCPUSeconds: 1.5, Bottleneck: policy.StorageCPU}}
		e := &Offloads{StorageNS: int64(1.5 * tc.got * 1e9)}
		r := &report.EpochReport{Epoch: 1, Seconds: 2, BytesReceived: 2e6}
		if _, got := pl.Drift(r, e, ran); got != tc.replan {
			t.Errorf("storage CPU x%.2f: replan %v, want %v", tc.got, got, tc.replan)
		}
		if d := pl.Res.StorageSpeed - tc.wantSpd; d > 1e-9 || d < -1e-9 {
			t.Errorf("storage CPU x%.2f: speed %.4f, want %.4f", tc.got, pl.Res.StorageSpeed, tc.wantSpd)
		}
	}
	// The CPU matches the plan but the agent got less than its budget
	// (budget time 30% over): the effective speed is what is calibrated.
	pl := &Planner{Threshold: 0.2, Name: policy.NameSOPHON, Res: policy.Resources{LinkBytesPerSec: 1e6, StorageSpeed: 0.8}}
	ran := policy.Plan{Pred: policy.Prediction{Seconds: 2, StorageCPUSeconds: 1.5, Bottleneck: policy.StorageCPU}}
	e := &Offloads{StorageNS: 1.5e9, StorageEffNS: 1.95e9}
	if _, ok := pl.Drift(&report.EpochReport{Epoch: 1, Seconds: 2.6, BytesReceived: 2e6}, e, ran); !ok || math.Abs(pl.Res.StorageSpeed-0.8/1.3) > 1e-9 {
		t.Errorf("budget time x1.3: speed %.4f, want %.4f and a re-plan", pl.Res.StorageSpeed, 0.8/1.3)
	}
}

// TestStorageSpeedPooled: the storage speed is measured over the last
// SpeedWindow planned epochs, not the last one: an epoch 5% off a window
// that agrees with the plan re-plans nothing (a single epoch's
// measurement would have), one 2x off restarts the window from itself,
// and the window keeps at most SpeedWindow epochs.
func TestStorageSpeedPooled(t *testing.T) {
	pl := &Planner{Threshold: 0.2, Name: policy.NameSOPHON, Res: policy.Resources{LinkBytesPerSec: 1e6, StorageSpeed: 0.8}}
	ran := policy.Plan{Pred: policy.Prediction{Seconds: 2, StorageCPUSeconds: 1.5, Bottleneck: policy.StorageCPU}}
	epoch := func(ratio float64) (string, bool) {
		return pl.Drift(&report.EpochReport{Epoch: 1, Seconds: 2, BytesReceived: 2e6}, &Offloads{StorageEffNS: int64(1.5 * ratio * 1e9)}, ran)
	}
	if _, ok := epoch(1.1); !ok || math.Abs(pl.Res.StorageSpeed-0.8/1.1) > 1e-9 {
		t.Fatalf("first epoch x1.1: speed %.4f, want %.4f and a re-plan", pl.Res.StorageSpeed, 0.8/1.1)
	}
	// 5.3% faster than planned: alone past StorageCalibration, but the two
	// epochs' speed, (0.8 + 0.727) x 1.5 s / (1.65 + 1.425) s = 0.745, is
	// within it of the plan's 0.727.
	if why, ok := epoch(0.95); ok || math.Abs(pl.Res.StorageSpeed-0.8/1.1) > 1e-9 {
		t.Fatalf("second epoch x0.95: speed %.4f, re-plan %v (%s); want %.4f kept", pl.Res.StorageSpeed, ok, why, 0.8/1.1)
	}
	// A neighbour takes half the quota: the window restarts from this
	// epoch alone.
	want := 0.8 / 1.1 / 2
	if why, ok := epoch(2); !ok || math.Abs(pl.Res.StorageSpeed-want) > 1e-9 || strings.Contains(why, "over") {
		t.Fatalf("x2: speed %.4f, re-plan %v (%s); want %.4f from this epoch alone", pl.Res.StorageSpeed, ok, why, want)
	}
	for range 6 {
		epoch(1.06)
	}
	if n := len(pl.speeds); n != SpeedWindow {
		t.Fatalf("after 7 epochs the window holds %d, want %d", n, SpeedWindow)
	}
	// A refined profile is a new clock: the window empties.
	pl.Est = &profiler.Profile{}
	pl.Learn([]profiler.Observation{{ID: 1, Split: 1, StorageNS: 1e6}})
	if len(pl.speeds) != 0 {
		t.Fatalf("after Learn refined the profile the window holds %d", len(pl.speeds))
	}
}

// TestDriftLeavesTransport: an epoch's measured transport CPU per byte
// neither re-plans nor goes into the resources the plans are made under:
// the storage speed, measured on the offloads' effective time, holds it
// already.
func TestDriftLeavesTransport(t *testing.T) {
	pl := &Planner{Threshold: 0.2, Name: policy.NameSOPHON, Res: policy.Resources{LinkBytesPerSec: 1e6, StorageSpeed: 0.8}}
	ran := policy.Plan{Pred: policy.Prediction{Seconds: 2, StorageCPUSeconds: 1.5, Bottleneck: policy.StorageCPU}}
	r := &report.EpochReport{Epoch: 1, Seconds: 2, BytesReceived: 2e6, StorageNSPerByte: 5}
	if why, ok := pl.Drift(r, &Offloads{StorageEffNS: 1.5e9}, ran); ok || pl.Res.StorageNSPerByte != 0 {
		t.Errorf("transport 5 ns/B measured: re-plan %v (%s), planned ns/B %v; want neither", ok, why, pl.Res.StorageNSPerByte)
	}
}

// TestDriftLinkFaster: an epoch that carried more bytes per second than
// the planned link rate raises the rate (a link carries at most its
// capacity); within the threshold without a re-plan, past it with one;
// a slower epoch within the threshold leaves the rate.
func TestDriftLinkFaster(t *testing.T) {
	for _, tc := range []struct {
		got      float64 // bytes per second of the epoch, for a planned 10 MB/s
		replan   bool
		wantLink float64
	}{
		{11e6, false, 11e6},
		{13e6, true, 13e6},
		{9.5e6, false, 10e6},
	} {
		pl := &Planner{Threshold: 0.2, Name: policy.NameOptimal, Res: policy.Resources{LinkBytesPerSec: 10e6, StorageSpeed: 1}}
		ran := policy.Plan{Pred: policy.Prediction{Seconds: 2, Bottleneck: policy.Link}}
		r := &report.EpochReport{Epoch: 1, Seconds: 2, BytesReceived: int64(2 * tc.got)}
		why, got := pl.Drift(r, nil, ran)
		if got != tc.replan || pl.Res.LinkBytesPerSec != tc.wantLink {
			t.Errorf("%.1f MB/s: re-plan %v (%q), link %.1f MB/s; want %v, %.1f MB/s", tc.got/1e6, got, why, pl.Res.LinkBytesPerSec/1e6, tc.replan, tc.wantLink/1e6)
		}
	}
}

// TestDriftLinkPeak: an epoch whose storage side was busy throughout
// (4 of its 5 storage cores' seconds or more) and that carried 7 MB/s
// over all but peaked at 12 MB/s for a second raises a planned 7.5 MB/s
// link to the peak and re-plans; a peak within the threshold of the plan
// changes nothing, nor does any peak of an epoch whose storage side idled
// (a receiver catching up reads high), and the epoch's own rate still
// raises past it.
func TestDriftLinkPeak(t *testing.T) {
	for _, tc := range []struct {
		got, peak, busy float64
		replan          bool
		wantLink        float64
	}{
		{7e6, 12e6, 0.9, true, 12e6},
		{7e6, 12e6, 0.5, false, 7.5e6},
		{7e6, 8.5e6, 0.9, false, 7.5e6},
		{10e6, 9e6, 0.9, true, 10e6},
	} {
		pl := &Planner{Threshold: 0.2, Name: policy.NameOptimal, Res: policy.Resources{LinkBytesPerSec: 7.5e6, StorageSpeed: 1, StorageCores: 1}}
		ran := policy.Plan{Pred: policy.Prediction{Seconds: 2, Bottleneck: policy.StorageCPU}}
		r := &report.EpochReport{Epoch: 1, Seconds: 2, BytesReceived: int64(2 * tc.got), LinkPeakBytesPerSec: tc.peak}
		m := &Offloads{StorageEffNS: int64(tc.busy * 2e9)}
		why, got := pl.Drift(r, m, ran)
		if got != tc.replan || pl.Res.LinkBytesPerSec != tc.wantLink {
			t.Errorf("%.1f MB/s, peak %.1f: re-plan %v (%q), link %.1f MB/s; want %v, %.1f MB/s", tc.got/1e6, tc.peak/1e6, got, why, pl.Res.LinkBytesPerSec/1e6, tc.replan, tc.wantLink/1e6)
		}
	}
	// The peak reads high: the next epoch the link binds gives its own
	// rate without a re-plan, once; after that a slower link-bound epoch
	// within the threshold leaves the rate.
	pl := &Planner{Threshold: 0.2, Name: policy.NameOptimal, Res: policy.Resources{LinkBytesPerSec: 7.5e6, StorageSpeed: 1, StorageCores: 1}}
	storage := policy.Plan{Pred: policy.Prediction{Seconds: 2, Bottleneck: policy.StorageCPU}}
	link := policy.Plan{Pred: policy.Prediction{Seconds: 2, Bottleneck: policy.Link}}
	pl.Drift(&report.EpochReport{Epoch: 1, Seconds: 2, BytesReceived: 14e6, LinkPeakBytesPerSec: 12.6e6}, &Offloads{StorageEffNS: 1.9e9}, storage)
	if pl.Res.LinkBytesPerSec != 12.6e6 {
		t.Fatalf("busy storage-bound epoch peaking at 12.6 MB/s: link %.2f MB/s, want 12.6", pl.Res.LinkBytesPerSec/1e6)
	}
	for i, want := range []float64{11.9e6, 11.9e6} {
		why, replan := pl.Drift(&report.EpochReport{Epoch: uint64(2 + i), Seconds: 2, BytesReceived: int64(2 * (11.9e6 - float64(i)*0.3e6)), LinkPeakBytesPerSec: 12.4e6}, nil, link)
		if replan || pl.Res.LinkBytesPerSec != want {
			t.Errorf("link-bound epoch %d after the peak: re-plan %v (%q), link %.2f MB/s; want none, %.2f MB/s", 2+i, replan, why, pl.Res.LinkBytesPerSec/1e6, want/1e6)
		}
	}
}

// TestDriftLinkOverlapped: a first epoch that ran the provisional plan
// before its plan took over (stage 1 beside it) does not lower the link
// rate however slow its bytes over seconds, and still raises it.
func TestDriftLinkOverlapped(t *testing.T) {
	for _, tc := range []struct {
		got, want float64
		replan    bool
	}{{9e6, 12e6, false}, {15e6, 15e6, true}} {
		pl := &Planner{Threshold: 0.2, Name: policy.NameOptimal, Res: policy.Resources{LinkBytesPerSec: 12e6, StorageSpeed: 1, StorageCores: 1}}
		ran := policy.Plan{Pred: policy.Prediction{Seconds: 2, Bottleneck: policy.Link}}
		r := &report.EpochReport{Epoch: 0, Seconds: 2, BytesReceived: int64(2 * tc.got), Stage1: &report.Stage1Summary{Overlapped: true}}
		why, replan := pl.Drift(r, nil, ran)
		if replan != tc.replan || pl.Res.LinkBytesPerSec != tc.want {
			t.Errorf("overlapped first epoch at %.0f MB/s: re-plan %v (%q), link %.1f MB/s; want %v, %.1f", tc.got/1e6, replan, why, pl.Res.LinkBytesPerSec/1e6, tc.replan, tc.want/1e6)
		}
	}
}

// TestDriftLinkCalibrationHigh: a link rate that read high (13.3 MB/s)
// comes down to a storage-bound epoch's busiest second (12.1) when that is
// within peakOvershoot of it, quietly; a busiest second further under it
// (9, a link the epoch did not fill) leaves it.
func TestDriftLinkCalibrationHigh(t *testing.T) {
	for _, tc := range []struct{ peak, want float64 }{{12.1e6, 12.1e6}, {9e6, 13.3e6}} {
		pl := &Planner{Threshold: 0.2, Name: policy.NameOptimal, linkPeaked: true,
			Res: policy.Resources{LinkBytesPerSec: 13.3e6, StorageSpeed: 1, StorageCores: 1}}
		ran := policy.Plan{Pred: policy.Prediction{Seconds: 2, Bottleneck: policy.StorageCPU}}
		r := &report.EpochReport{Epoch: 1, Seconds: 2, BytesReceived: int64(2 * 0.9 * tc.peak), LinkPeakBytesPerSec: tc.peak}
		why, replan := pl.Drift(r, &Offloads{StorageEffNS: 1.9e9}, ran)
		if replan || pl.Res.LinkBytesPerSec != tc.want {
			t.Errorf("peak %.1f MB/s under a planned 13.3: re-plan %v (%q), link %.2f MB/s; want none, %.2f", tc.peak/1e6, replan, why, pl.Res.LinkBytesPerSec/1e6, tc.want/1e6)
		}
	}
}

// TestGuard: a planned epoch slower than the last measured No-Off epoch
// re-plans and says why; one as fast does not, nor does No-Off itself, nor
// any epoch before No-Off was measured.
func TestGuard(t *testing.T) {
	pl := &Planner{Threshold: 0.2, Name: policy.NameOptimal}
	if why := pl.Guard(&report.EpochReport{Epoch: 3, Seconds: 5.1}, 5); !strings.Contains(why, "guard") || !strings.Contains(why, "5.100") {
		t.Errorf("epoch 5.1 s against No-Off's 5 s: reason %q", why)
	}
	for _, c := range []struct {
		name        string
		secs, noOff float64
	}{{policy.NameOptimal, 4.9, 5}, {policy.NameOptimal, 9, 0}, {policy.NameNoOff, 9, 5}} {
		pl.Name = c.name
		if why := pl.Guard(&report.EpochReport{Epoch: 3, Seconds: c.secs}, c.noOff); why != "" {
			t.Errorf("%s: epoch %.1f s, No-Off %.1f s: guard fired (%q)", c.name, c.secs, c.noOff, why)
		}
	}
}

// TestObserveResources: the saved profile keeps the highest link rate
// measured (a slower epoch was bound by something else) and the running
// mean of the storage speed, and the last No-Off epoch.
func TestObserveResources(t *testing.T) {
	pl := &Planner{Saved: &profiler.Profile{}}
	pl.Observe(profiler.MeasuredResources{LinkBytesPerSec: 10, StorageSpeed: 1, NoOffSeconds: 7})
	pl.Observe(profiler.MeasuredResources{LinkBytesPerSec: 8, StorageSpeed: 0.5, NoOffSeconds: 5})
	m := pl.Saved.Resources
	if m.LinkBytesPerSec != 10 || m.StorageSpeed != 0.75 || m.NoOffSeconds != 5 {
		t.Fatalf("after 10 then 8 B/s, speeds 1 then 0.5, No-Off 7 then 5 s: %+v", *m)
	}
	pl.Observe(profiler.MeasuredResources{LinkBytesPerSec: 12})
	if m.LinkBytesPerSec != 12 || m.StorageSpeed != 0.75 {
		t.Fatalf("after 12 B/s: %+v", *m)
	}
	// No saved profile: nothing to update, and no panic.
	(&Planner{}).Observe(profiler.MeasuredResources{LinkBytesPerSec: 1})
}

// TestReplanCluster: with two storage agents the planner plans per agent
// on Res.Over(Nodes): the plan names a replica for every sample, one that
// holds it, the run plan answers with the agent's name, and the plan and
// bound are the cluster planner's for that cluster. With one agent it
// plans on the pooled resources.
func TestReplanCluster(t *testing.T) {
	prof := synthetic.ProfileCut("imagenet-like", 400, 3)
	res := policy.Resources{LinkBytesPerSec: 25e6, StorageCores: 2, ComputeCores: 2, StorageSpeed: 1}
	nodes := []policy.StorageNode{{Name: "a", Cores: 1, EgressBytesPerSec: 30e6}, {Name: "b", Cores: 1, EgressBytesPerSec: 10e6}}
	// Agent b holds only the even samples.
	holds := func(node int, s uint64) bool { return node == 0 || s%2 == 0 }
	pl := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof, Nodes: nodes, Holds: holds}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	if pl.Cluster == nil || len(pl.Plan.Replica) != len(prof.Samples) || pl.Plan.Cluster == nil {
		t.Fatalf("cluster %v, %d replicas for %d samples", pl.Cluster, len(pl.Plan.Replica), len(prof.Samples))
	}
	if got := pl.Cluster.Storage; got[0].EgressBytesPerSec != 18.75e6 || got[1].Cores != 1 {
		t.Errorf("cluster storage %+v: want the pooled 25 MB/s spread 3:1", got)
	}
	served := map[string]int{}
	for i, s := range prof.Samples {
		name, ok := pl.Run.Replica(s.ID)
		if !ok || name != nodes[pl.Plan.Replica[i]].Name {
			t.Fatalf("sample %d: Replica %q %v, plan %d", s.ID, name, ok, pl.Plan.Replica[i])
		}
		if !holds(int(pl.Plan.Replica[i]), s.ID) {
			t.Fatalf("sample %d planned on %s, which does not hold it", s.ID, name)
		}
		served[name]++
	}
	if served["a"] == 0 || served["b"] == 0 {
		t.Errorf("served %v: want both agents used", served)
	}
	place, err := policy.NewPlacement(make([]int32, len(prof.Samples)), func(i int) []int16 {
		if prof.Samples[i].ID%2 == 0 {
			return []int16{0, 1}
		}
		return []int16{0}
	})
	if err != nil {
		t.Fatal(err)
	}
	want, b, err := policy.Solve(policy.NameOptimal, policy.On(profiler.ExpectCosts(prof), *pl.Cluster, place))
	if err != nil {
		t.Fatal(err)
	}
	if want.Pred.Seconds != pl.Plan.Pred.Seconds || b.Seconds != pl.Bound {
		t.Errorf("planned %.6f s bound %.6f, the cluster planner %.6f bound %.6f", pl.Plan.Pred.Seconds, pl.Bound, want.Pred.Seconds, b.Seconds)
	}
	one := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof, Nodes: nodes[:1]}
	if err := one.Replan(); err != nil {
		t.Fatal(err)
	}
	if one.Cluster != nil || one.Plan.Replica != nil {
		t.Errorf("one agent: cluster %v, replicas %d", one.Cluster, len(one.Plan.Replica))
	}
	if _, ok := one.Run.Replica(prof.Samples[0].ID); ok {
		t.Error("one agent: a replica named")
	}
}

// TestReplanClusterCache: with two storage agents and a cache budget the
// cluster plan keeps the residency one agent's plan would choose (on the
// pooled resources) at the cache split, within the budget, plans the rest
// per agent, sends fewer bytes than without the cache and is no slower;
// a re-plan keeps the same samples resident.
func TestReplanClusterCache(t *testing.T) {
	prof := synthetic.ProfileCut("openimages-like", 200, 7)
	res := policy.Resources{LinkBytesPerSec: 12.5e6, StorageCores: 1, ComputeCores: 2, StorageSpeed: 1}
	nodes := []policy.StorageNode{{Name: "a", Cores: 0.5, EgressBytesPerSec: 6.25e6}, {Name: "b", Cores: 0.5, EgressBytesPerSec: 6.25e6}}
	var total float64
	for _, s := range prof.Samples {
		total += float64(s.Bytes[0])
	}
	plain := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof, Nodes: nodes}
	if err := plain.Replan(); err != nil {
		t.Fatal(err)
	}
	pl := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof, Nodes: nodes, CacheBytes: total / 4}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	single := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof, CacheBytes: total / 4}
	if err := single.Replan(); err != nil {
		t.Fatal(err)
	}
	got, want := residentIDs(pl.Plan), residentIDs(single.Plan)
	if pl.Cluster == nil || len(got) == 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("cluster %v: resident %v, want one agent's residency %v", pl.Cluster != nil, got, want)
	}
	var used float64
	k := policy.CacheSplit(prof)
	for i, c := range pl.Plan.Cached {
		if c {
			used += cacheplan.Entry(&prof.Samples[i], k)
			if pl.Plan.Split[i] != k || !pl.Run.Cached(prof.Samples[i].ID) {
				t.Fatalf("resident sample %d at split %d (cached %v), want %d", i, pl.Plan.Split[i], pl.Run.Cached(prof.Samples[i].ID), k)
			}
		}
	}
	if used > total/4 {
		t.Errorf("%v B resident, budget %v", used, total/4)
	}
	if pl.Plan.Pred.Bytes >= plain.Plan.Pred.Bytes || pl.Plan.Pred.Seconds > plain.Plan.Pred.Seconds || pl.Bound > pl.Plan.Pred.Seconds*(1+1e-9) {
		t.Errorf("with the cache %.0f B in %.3f s (bound %.3f), without %.0f B in %.3f s", pl.Plan.Pred.Bytes, pl.Plan.Pred.Seconds, pl.Bound, plain.Plan.Pred.Bytes, plain.Plan.Pred.Seconds)
	}
	pl.Res.LinkBytesPerSec /= 2
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	if again := residentIDs(pl.Plan); !reflect.DeepEqual(again, got) {
		t.Errorf("a re-plan moved the residency: %v, then %v", got, again)
	}
}

// TestReplanCacheBytes: the planner plans under the cache budget it was
// given (compute-agent --cache-bytes), whatever its resources said, and
// the run plan answers Cached from the plan's residency.
func TestReplanCacheBytes(t *testing.T) {
	prof := synthetic.ProfileCut("imagenet-like", 50, 3)
	pl := &Planner{Name: policy.NameSOPHON, Res: policy.Resources{LinkBytesPerSec: 25e6, StorageCores: 2, ComputeCores: 2, StorageSpeed: 1}, Prof: prof, CacheBytes: 5e6}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	if pl.Res.CacheBytes != 5e6 {
		t.Fatalf("planned with CacheBytes %v, want 5e6", pl.Res.CacheBytes)
	}
	plan := pl.Plan
	plan.Cached = make([]bool, len(plan.IDs))
	plan.Cached[1] = true
	run := NewRunPlan(&plan, prof, pl.Res)
	if !run.Caches() || !run.Cached(plan.IDs[1]) || run.Cached(plan.IDs[0]) || run.Cached(1<<40) {
		t.Fatal("RunPlan.Cached does not follow the plan's residency")
	}
	if (*RunPlan)(nil).Cached(0) || NewRunPlan(&pl.Plan, prof, pl.Res).Cached(plan.IDs[1]) && pl.Plan.Cached == nil {
		t.Fatal("a plan without residency caches")
	}
}

// TestReplanKeepsResidency: the first plan with a cache budget chooses the
// residency, and a re-plan on a changed profile and changed resources
// keeps exactly those samples resident (the cache's contents never move),
// while a fresh planner on the changed inputs may choose others.
func TestReplanKeepsResidency(t *testing.T) {
	prof := synthetic.ProfileCut("openimages-like", 200, 7)
	res := policy.Resources{LinkBytesPerSec: 12.5e6, StorageCores: 1, ComputeCores: 2, StorageSpeed: 1}
	var total float64
	for _, s := range prof.Samples {
		total += float64(s.Bytes[0])
	}
	pl := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof, CacheBytes: total / 4}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	first := residentIDs(pl.Plan)
	if len(first) == 0 {
		t.Fatal("a quarter of the dataset as cache budget, and nothing resident")
	}
	// The bound at the residency chosen: at least the cache bound (which
	// may move it), within 1% of it (whole samples against the
	// relaxation's fractions), below the bound without a cache.
	none := res
	none.CacheBytes = 0
	cb, err := policy.Bound(policy.OneNode(prof, pl.Res))
	if err != nil {
		t.Fatal(err)
	}
	nb, err := policy.Bound(policy.OneNode(prof, none))
	if err != nil {
		t.Fatal(err)
	}
	if b := cb.Seconds; pl.CacheBound != b || pl.Bound < b || pl.Bound > 1.01*b || pl.Bound >= nb.Seconds {
		t.Errorf("bound %v, cache bound %v: want at least the cache bound %v, within 1%%, below the bound without cache %v", pl.Bound, pl.CacheBound, b, nb.Seconds)
	}
	changed := synthetic.ProfileCut("openimages-like", 200, 8) // other sizes and costs, same ids
	pl.Prof, pl.Res.LinkBytesPerSec, pl.Res.StorageCores = changed, 50e6, 4
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	if again := residentIDs(pl.Plan); !maps.Equal(again, first) {
		t.Errorf("re-plan moved the residency: %d resident, %d before", len(again), len(first))
	}
	for i, c := range pl.Plan.Cached {
		if !c && first[pl.Plan.IDs[i]] {
			t.Fatalf("sample %d lost its residency", pl.Plan.IDs[i])
		}
	}
}

func residentIDs(pl policy.Plan) map[uint64]bool {
	ids := map[uint64]bool{}
	for i, c := range pl.Cached {
		if c {
			ids[pl.IDs[i]] = true
		}
	}
	return ids
}

// TestLearn: a run planning from an estimate refines it with an epoch's
// observations (storage CPU converted with the plan's storage speed, the
// effective time where the agent reported one) and
// reports them new once: the same observations again change nothing. The
// epoch that refined the costs does not also calibrate the storage speed
// on them; a run with a recorded profile (no Est) learns nothing.
func TestLearn(t *testing.T) {
	est := &profiler.Profile{Version: profiler.ProfileVersion, Ops: []string{"a", "b"}, Samples: []profiler.SampleProfile{
		{ID: 3, Raw: 100, Bytes: []int64{100, 50, 20}, OpNS: []int64{10, 10}},
		{ID: 5, Raw: 100, Bytes: []int64{100, 50, 20}, OpNS: []int64{10, 10}},
	}}
	pl := &Planner{Threshold: 0.2, Name: policy.NameSOPHON, Est: est, Prof: est, Source: report.PlanEstimate,
		Res: policy.Resources{LinkBytesPerSec: 1e6, StorageSpeed: 0.5}}
	obs := []profiler.Observation{{ID: 3, Split: 1, Payload: 40, StorageNS: 60, LocalNS: 30},
		{ID: 5, Split: 1, Payload: 40, StorageNS: 60, StorageEffNS: 80, LocalNS: 30}}
	if n := pl.Learn(obs); n != 2 || pl.Source != report.PlanMeasured {
		t.Fatalf("learned %d (source %q), want 2 and %q", n, pl.Source, report.PlanMeasured)
	}
	s := pl.Prof.Samples[0]
	if s.Bytes[1] != 40 || s.OpNS[0] != 30 || s.OpNS[1] != 30 { // 60 ns there at half speed: 30 here
		t.Errorf("refined sample %+v, want 40 bytes at split 1 and ops of 30 ns", s)
	}
	if s := pl.Prof.Samples[1]; s.OpNS[0] != 40 { // 80 ns of budget time at half speed: 40 here
		t.Errorf("refined sample %+v, want split 1's op at 40 ns (the effective time)", s)
	}
	if est.Samples[0].Bytes[1] != 50 {
		t.Error("the estimate itself changed")
	}
	ran := policy.Plan{Pred: policy.Prediction{Seconds: 2, StorageCPUSeconds: 1, Bottleneck: policy.StorageCPU}}
	if _, _ = pl.Drift(&report.EpochReport{Epoch: 0, Seconds: 2}, &Offloads{StorageNS: 2e9}, ran); pl.Res.StorageSpeed != 0.5 {
		t.Errorf("speed %v after a refining epoch, want 0.5 kept", pl.Res.StorageSpeed)
	}
	if n := pl.Learn(obs); n != 0 {
		t.Errorf("the same observations again: %d new, want 0", n)
	}
	if _, _ = pl.Drift(&report.EpochReport{Epoch: 1, Seconds: 2}, &Offloads{StorageNS: 2e9}, ran); pl.Res.StorageSpeed == 0.5 {
		t.Error("speed not calibrated after an epoch that refined nothing")
	}
	rec := &Planner{Prof: est, Source: report.PlanProfile}
	if n := rec.Learn(obs); n != 0 || rec.Prof != est {
		t.Errorf("a recorded profile's run learned %d", n)
	}
	kept := &Planner{Prof: est, Est: est, Source: report.PlanEstimate, NoRefine: true}
	if n := kept.Learn(obs); n != 0 || kept.Prof != est || kept.Source != report.PlanEstimate {
		t.Errorf("--no-refine learned %d (source %q)", n, kept.Source)
	}
}

// TestForEpoch: with CutAreas the planner plans each epoch on that
// epoch's crop boxes (its prediction is the policy's on the scaled
// profile, and differs between epochs), keeps the profile itself on the
// mean boxes, keeps the residency chosen on them, and re-plans only for a
// new epoch.
func TestForEpoch(t *testing.T) {
	pipe, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	prof := synthetic.ProfileCut("openimages-like", 120, 3)
	areas := &profiler.CutAreas{Pipe: pipe, Seed: 1, Image: func(uint64) (profiler.CutImage, bool) {
		return profiler.CutImage{W: 1024, H: 768}, true
	}}
	res := policy.Resources{LinkBytesPerSec: 12.5e6, StorageCores: 1, ComputeCores: 2, StorageSpeed: 1}
	var total float64
	for _, s := range prof.Samples {
		total += float64(s.Bytes[0])
	}
	pl := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof, Areas: areas, CacheBytes: total / 4}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	first := residentIDs(pl.Plan)
	seen := map[float64]bool{}
	for e := uint64(1); e <= 4; e++ {
		if err := pl.ForEpoch(e); err != nil {
			t.Fatal(err)
		}
		if pl.Prof != prof {
			t.Fatal("ForEpoch replaced the mean-box profile")
		}
		scaled := areas.AtEpoch(areas.Expect(prof), e)
		cached := make([]bool, len(scaled.Samples))
		for i, s := range scaled.Samples {
			cached[i] = first[s.ID]
		}
		want, wb, err := policy.Resident(policy.NameOptimal, policy.OneNode(scaled, pl.Res), cached)
		if err != nil {
			t.Fatal(err)
		}
		if pl.Plan.Pred.Seconds != want.Pred.Seconds || pl.Bound != wb.Seconds {
			t.Fatalf("epoch %d: predicted %v, bound %v; want the plan on the epoch's boxes: %v, %v", e, pl.Plan.Pred.Seconds, pl.Bound, want.Pred.Seconds, wb.Seconds)
		}
		if !maps.Equal(residentIDs(pl.Plan), first) {
			t.Fatalf("epoch %d moved the residency", e)
		}
		seen[pl.Plan.Pred.Bytes] = true
		plan := pl.Plan
		if err := pl.ForEpoch(e); err != nil || !reflect.DeepEqual(plan.Split, pl.Plan.Split) {
			t.Fatalf("the same epoch again re-planned differently (%v)", err)
		}
	}
	if len(seen) < 2 {
		t.Fatal("four epochs' plans send the same bytes: the boxes were not applied")
	}
}

// TestDriftSizes: the epoch-varying sizes are calibrated on the mean of
// what the epochs' samples of varying size sent over the plan; a change
// of the calibration past SizeCalibration re-plans (the new plan predicts
// more bytes for the same splits), one within it does not.
func TestDriftSizes(t *testing.T) {
	prof := synthetic.ProfileCut("openimages-like", 80, 5)
	res := policy.Resources{LinkBytesPerSec: 12.5e6, StorageCores: 1, ComputeCores: 2, StorageSpeed: 1}
	pl := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof, Threshold: 0.2}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	var planned int64
	for i, id := range pl.Plan.IDs {
		j, at := pl.Run.At(id, pl.Plan.Split[i])
		if _, other := pl.Run.At(id, pl.Plan.Split[i]+1); !at || other || j != i {
			t.Fatalf("sample %d: At finds entry %d (%v) at its split, %v at another", id, j, at, other)
		}
		if b, ok := pl.Run.VaryingAt(j); ok {
			planned += b
		}
	}
	if planned == 0 {
		t.Fatal("the plan has no sample of varying size (no cut, no compressed crop)")
	}
	r := &report.EpochReport{Seconds: 1, BytesReceived: 1}
	if why, drifted := pl.Drift(r, &Offloads{Bytes: planned * 101 / 100, PlannedBytes: planned}, pl.Plan); drifted && strings.Contains(why, "varying") {
		t.Fatalf("1%% off re-planned: %s", why)
	}
	before := pl.Plan.Pred.Bytes
	split := slices.Clone(pl.Plan.Split)
	why, drifted := pl.Drift(r, &Offloads{Bytes: planned * 106 / 100, PlannedBytes: planned}, pl.Plan)
	// The scale is the mean of the epochs' ratios times their plans'
	// scales: (1.01 x 1 + 1.06 x 1.01) / 2.
	if !drifted || !strings.Contains(why, "varying sizes 1.060") || math.Abs(pl.sizes()-(1.01+1.06*1.01)/2) > 1e-4 {
		t.Fatalf("6%% more: drift %v %q, scale %v", drifted, why, pl.sizes())
	}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(split, pl.Plan.Split) && pl.Plan.Pred.Bytes <= before {
		t.Errorf("same splits, predicted %v bytes, %v before: the sizes were not scaled", pl.Plan.Pred.Bytes, before)
	}
}

// TestInvalidate: a plan marked out of date is re-planned by the next
// ForEpoch even for the same epoch and without per-epoch boxes, once; an
// up-to-date one is not.
func TestInvalidate(t *testing.T) {
	prof := synthetic.ProfileCut("imagenet-like", 40, 2)
	pl := &Planner{Name: policy.NameOptimal, Res: policy.Resources{LinkBytesPerSec: 12.5e6, StorageCores: 1, ComputeCores: 2, StorageSpeed: 1}, Prof: prof}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	first := pl.Run
	if err := pl.ForEpoch(1); err != nil || pl.Run != first {
		t.Fatalf("an up-to-date plan without boxes was re-planned (%v)", err)
	}
	pl.Res.LinkBytesPerSec = 3e6 // what a drift would change
	pl.Invalidate()
	if err := pl.ForEpoch(1); err != nil || pl.Run == first || pl.Plan.Pred.Seconds <= 0 {
		t.Fatalf("an invalidated plan was not re-planned (%v)", err)
	}
	again := pl.Run
	if err := pl.ForEpoch(1); err != nil || pl.Run != again {
		t.Fatalf("re-planned twice for one invalidation (%v)", err)
	}
}

// TestProbeSpeedExpectedCosts: the probe is priced against the costs the
// plans use, ExpectCosts', not each sample's one noisy timing: over many
// draws of a profile whose timings scatter by 20% around costs set by the
// sizes, and a probe of 24 samples whose storage agent takes exactly
// twice the true cost, the speed lands nearer the true 0.5 than priced
// against the raw timings, and is exactly the speed against ExpectCosts.
func TestProbeSpeedExpectedCosts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	var errExpected, errRaw float64
	for range 50 {
		prof := &profiler.Profile{Ops: []string{"decode", "crop", "norm"}}
		ids := make([]uint64, 0, 24)
		ns, eff := map[uint64]int64{}, map[uint64]int64{}
		for i := range 96 {
			px := int64(200_000 + rng.IntN(800_000))
			crop := px / int64(2+rng.IntN(6))
			trueDecode, trueCrop := 40*px, 5*crop
			noisy := func(c int64) int64 { return int64(float64(c) * math.Exp(0.2*rng.NormFloat64())) }
			id := uint64(i + 1)
			prof.Samples = append(prof.Samples, profiler.SampleProfile{ID: id, Raw: px / 10,
				Bytes: []int64{px / 10, px, crop, crop}, OpNS: []int64{noisy(trueDecode), noisy(trueCrop), 1000}})
			if i%4 == 0 {
				ids = append(ids, id)
				ns[id], eff[id] = 2*(trueDecode+trueCrop), 2*(trueDecode+trueCrop)
			}
		}
		pl := &Planner{Log: zerolog.Nop()}
		pl.Probe = stage1.ProbeOf(2, ids, ns, eff, nil)
		if _, ok := pl.ProbeSpeed(prof); !ok {
			t.Fatal("no speed")
		}
		exp := profiler.ExpectCosts(prof)
		at := func(p *profiler.Profile) func(uint64, int) (float64, bool) {
			return func(id uint64, k int) (float64, bool) {
				s := p.Samples[id-1].OpNS
				return float64(s[0] + s[1]), k == 2
			}
		}
		want, _, _ := pl.Probe.SpeedAgainst(at(exp))
		if !near(pl.Res.StorageSpeed, want) {
			t.Fatalf("speed %v, want %v: the probe against the expected costs", pl.Res.StorageSpeed, want)
		}
		raw, _, _ := pl.Probe.SpeedAgainst(at(prof))
		errExpected += math.Abs(math.Log(pl.Res.StorageSpeed / 0.5))
		errRaw += math.Abs(math.Log(raw / 0.5))
	}
	if errExpected >= errRaw {
		t.Errorf("mean |log error| %.4f against the expected costs, %.4f against the raw timings: want smaller", errExpected/50, errRaw/50)
	}
	t.Logf("mean |log error| of the speed: %.4f against the expected costs, %.4f against the raw timings", errExpected/50, errRaw/50)
}

// TestProbeSpeed: with a measured profile the storage speed is stage 1's
// probe priced against the profile's op costs of ops[0:k]; without a
// sample in common the speed stays stage 1's own.
func TestProbeSpeed(t *testing.T) {
	prof := &profiler.Profile{Ops: []string{"decode", "crop", "norm"}, Samples: []profiler.SampleProfile{
		{ID: 7, OpNS: []int64{30, 10, 1000}},
		{ID: 9, OpNS: []int64{50, 30, 1000}},
	}}
	pl := &Planner{Log: zerolog.Nop(), Res: policy.Resources{StorageSpeed: 0.7}}
	pl.Probe = stage1.ProbeOf(2, []uint64{7, 9}, map[uint64]int64{7: 30, 9: 40}, map[uint64]int64{7: 40, 9: 40}, nil)
	rse, ok := pl.ProbeSpeed(prof)
	if !ok || pl.Res.StorageSpeed != 120.0/80 {
		t.Fatalf("speed %v (ok %v), want (40+80)/(40+40): ops[0:2] of the profile over the effective CPU", pl.Res.StorageSpeed, ok)
	}
	if !(rse > 0) {
		t.Errorf("rse %v, want > 0", rse)
	}
	pl.Res.StorageSpeed = 0.7
	pl.Probe = stage1.ProbeOf(2, []uint64{1, 2}, map[uint64]int64{1: 30, 2: 40}, map[uint64]int64{1: 40, 2: 40}, nil)
	if _, ok := pl.ProbeSpeed(prof); ok || pl.Res.StorageSpeed != 0.7 {
		t.Errorf("no sample in common: speed %v (ok %v), want stage 1's 0.7 kept", pl.Res.StorageSpeed, ok)
	}
}

// TestDriftCompute: the compute CPU per sample beyond the ops is the
// compute agent's process CPU less its finishing CPU over the samples it
// delivered, pooled over the epochs; a change that moves the plan's
// compute time by less than StorageCalibration of its epoch does not
// re-plan, a profiled epoch does not count, and a compute side busy for
// the whole epoch keeps the link's drift from reading its pace as a
// slower link.
func TestDriftCompute(t *testing.T) {
	pl := &Planner{Threshold: 0.2, Name: policy.NameOptimal, Res: policy.Resources{LinkBytesPerSec: 12e6, StorageSpeed: 1, ComputeCores: 1}}
	ran := policy.Plan{Pred: policy.Prediction{Seconds: 1.5, LinkSeconds: 1.5, ComputeSeconds: 1.1, Bottleneck: policy.Link}}
	epoch := func(n uint64, ops, proc float64, profiled bool) (string, bool) {
		// 900 samples in 1.8 s, 16 MB: 8.9 MB/s on a planned 12, which
		// the link's drift would take for the link's were the compute
		// side not busy.
		r := &report.EpochReport{Epoch: n, Seconds: 1.8, Samples: 900, BytesReceived: 16e6, ComputeCPUSeconds: ops, ProcessCPUSeconds: proc, Profiled: profiled}
		return pl.Drift(r, nil, ran)
	}
	if why, ok := epoch(0, 1.0, 9, true); ok {
		t.Fatalf("a profiled epoch re-planned: %s", why)
	}
	why, ok := epoch(1, 1.1, 1.82, false)
	if !ok || math.Abs(pl.Res.ComputeNSPerSample-0.8e6) > 1 || pl.Res.LinkBytesPerSec != 12e6 || pl.Res.ComputeCores != 1 {
		t.Fatalf("0.72 s beyond the ops for 900 samples: re-plan %v (%q), %v ns a sample, link %v, cores %v; want true, 800000, 12e6 (the link's drift held back), 1",
			ok, why, pl.Res.ComputeNSPerSample, pl.Res.LinkBytesPerSec, pl.Res.ComputeCores)
	}
	if !strings.Contains(why, "compute cpu beyond the ops") {
		t.Errorf("reason %q does not name the compute side", why)
	}
	// The next epoch: 0.85 ms a sample, pooled 0.825 ms, which moves the
	// plan's compute time by 0.0225 s of a 1.5 s epoch: no re-plan.
	if why, ok := epoch(2, 1.0, 1.765, false); ok || math.Abs(pl.Res.ComputeNSPerSample-0.8e6) > 1 {
		t.Errorf("0.85 ms after 0.8: re-planned %v (%s), %v ns a sample; want neither, 800000", ok, why, pl.Res.ComputeNSPerSample)
	}
	// Twice as much: past the threshold, the window restarts from it.
	if why, ok := epoch(3, 1.0, 2.44, false); !ok || math.Abs(pl.Res.ComputeNSPerSample-1.6e6) > 1 {
		t.Errorf("1.6 ms a sample: re-plan %v (%s), %v ns; want true, 1600000", ok, why, pl.Res.ComputeNSPerSample)
	}
}

// TestReplanPricesComputePerSample: the compute CPU beyond the ops per
// sample prices the plan's epoch but does not choose it: the plan (its
// splits, its bound) is the one made without it, and its prediction's
// compute CPU holds it once per sample.
func TestReplanPricesComputePerSample(t *testing.T) {
	prof := synthetic.ProfileCut("openimages-like", 300, 7)
	// A compute side one core short enough for the term to bind.
	res := policy.Resources{LinkBytesPerSec: 12e6, StorageCores: 1, ComputeCores: 1, StorageSpeed: 1}
	without := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof}
	if err := without.Replan(); err != nil {
		t.Fatal(err)
	}
	res.ComputeNSPerSample = 5e6
	with := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof}
	if err := with.Replan(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(with.Plan.Split, without.Plan.Split) || with.Bound != without.Bound {
		t.Errorf("the term changed the plan or its bound: bound %v -> %v", without.Bound, with.Bound)
	}
	extra := 5e6 * float64(len(prof.Samples)) / 1e9
	if d := with.Plan.Pred.ComputeCPUSeconds - without.Plan.Pred.ComputeCPUSeconds; math.Abs(d-extra) > 1e-6 {
		t.Errorf("predicted compute CPU %v -> %v: want %v more", without.Plan.Pred.ComputeCPUSeconds, with.Plan.Pred.ComputeCPUSeconds, extra)
	}
	if with.Plan.Pred.Seconds < with.Plan.Pred.ComputeSeconds-1e-9 {
		t.Errorf("prediction %v s under its own compute time %v s", with.Plan.Pred.Seconds, with.Plan.Pred.ComputeSeconds)
	}
	if with.Expected.ComputeCPUSeconds != with.Plan.Pred.ComputeCPUSeconds {
		t.Errorf("expected compute CPU %v, plan's %v", with.Expected.ComputeCPUSeconds, with.Plan.Pred.ComputeCPUSeconds)
	}
}
