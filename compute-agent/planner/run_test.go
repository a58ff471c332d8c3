package planner

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/planner/stage1"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/synthetic"
	"github.com/sophon-dl/sophon/profiler"
)

// TestRunDefersStage1ToTheFirstEpoch drives a policy run with no engine
// and no storage agent: with headers in the catalog and no saved profile,
// Start does not run stage 1 (there is no source to run it on) and the
// first epoch runs the provisional plan, its calibration samples raw
// (never a header bomb) and every other sample cut, with stage 1 to run
// beside it (Started) and the raw files kept for it (KeepRaw). The next
// epoch, with no plan made, runs No-Off.
func TestRunDefersStage1ToTheFirstEpoch(t *testing.T) {
	bombs := map[uint64]bool{0: true, 5: true}
	in := estimateShard(t, 40, bombs)
	h := &Host{Log: zerolog.Nop(), Now: time.Now, Policy: policy.NameSOPHON, Threshold: 0.2,
		Pipeline: in.Pipeline, PipelineID: in.Pipeline.ID(), Seed: in.Seed, Rank: 0, World: 1,
		Limits: oplimits.Default(), Stage1: &stage1.Config{},
		Catalog: Catalog{Fingerprint: in.Fingerprint, Total: uint64(len(in.Shard)), RawSizes: in.RawSizes,
			Header: in.Header, HasHeaders: true},
		SplitOf: func(p *RunPlan) func(uint64) (int, error) {
			return func(s uint64) (int, error) { return p.Split(s, in.Pipeline, in.Pipeline.Len()) }
		}}
	run, err := Start(context.Background(), h, in.Shard)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if !h.Stage1.Quick {
		t.Errorf("stage 1 not set to run beside the first epoch")
	}
	first := run.Next(0, 0)
	if first.Err != nil || first.Plan == nil || first.Plan.Name() != ProvisionalName {
		t.Fatalf("first epoch: plan %v, err %v; want the provisional plan", first.Plan, first.Err)
	}
	if first.Started == nil || first.Annotate == nil || first.KeepRaw == nil || !first.Observe || !first.WarmCache {
		t.Errorf("first epoch: started %t, annotate %t, keep raw %t, observe %t, warm cache %t; want all",
			first.Started != nil, first.Annotate != nil, first.KeepRaw != nil, first.Observe, first.WarmCache)
	}
	raw := 0
	for _, s := range in.Shard {
		k, err := first.Plan.Split(s, in.Pipeline, in.Pipeline.Len())
		if err != nil {
			t.Fatalf("sample %d: %v", s, err)
		}
		switch {
		case k == 0 && bombs[s]:
			t.Errorf("header bomb %d is a calibration sample", s)
		case k == 0:
			raw++
		case k != ops.SplitCut:
			t.Errorf("sample %d: split %d, want raw or cut", s, k)
		}
	}
	if raw != CalibrationSamples {
		t.Errorf("%d samples raw, want the %d calibration samples", raw, CalibrationSamples)
	}
	next := run.Next(1, 1)
	if next.Err != nil || next.Plan.Name() != policy.NameNoOff || next.Started != nil {
		t.Errorf("second epoch without a plan: plan %s, err %v, started %t; want nooff", next.Plan.Name(), next.Err, next.Started != nil)
	}
}

// quietEpoch is an Epoch that observed nothing: no bytes, no samples.
type quietEpoch struct{}

func (quietEpoch) BytesReceived() int64                                  { return 0 }
func (quietEpoch) Observations() []profiler.Observation                  { return nil }
func (quietEpoch) Offloads() *Offloads                                   { return nil }
func (quietEpoch) Swap(*RunPlan, func(uint64) int, float64, float64) int { return 0 }

// TestRunReportsThePrediction: a planned epoch's report carries the plan's
// prediction per resource and the resources it was made under, each
// resource's time its quantity over its resource, and an epoch without a
// plan (No-Off before a profile) carries none.
func TestRunReportsThePrediction(t *testing.T) {
	prof := synthetic.ProfileCut("openimages-like", 120, 3)
	res := policy.Resources{LinkBytesPerSec: 12.5e6, StorageCores: 0.5, ComputeCores: 2, StorageSpeed: 0.8, StorageNSPerByte: 3}
	h := &Host{Log: zerolog.Nop(), Now: time.Now, Policy: policy.NameOptimal}
	pl := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	run := &Run{h: h, pl: pl, cat: &Catalog{}}
	opts := run.Next(1, 1)
	if opts.Err != nil {
		t.Fatal(opts.Err)
	}
	want := pl.Plan.Pred
	var r report.EpochReport
	if err := opts.Annotate(&r, quietEpoch{}); err != nil {
		t.Fatal(err)
	}
	p := r.Prediction
	if p == nil {
		t.Fatal("a planned epoch's report has no prediction")
	}
	if p.Seconds != r.PredictedSeconds || p.Seconds != want.Seconds || p.Bottleneck != want.Bottleneck || p.Bottleneck == "" {
		t.Errorf("prediction %v s (%s), report %v s, plan %v s (%s)", p.Seconds, p.Bottleneck, r.PredictedSeconds, want.Seconds, want.Bottleneck)
	}
	if p.LinkBytesPerSec != res.LinkBytesPerSec || p.StorageCores != res.StorageCores || p.ComputeCores != res.ComputeCores ||
		p.StorageSpeed != res.StorageSpeed || p.StorageNSPerByte != res.StorageNSPerByte {
		t.Errorf("assumed resources %+v, want %+v", p, res)
	}
	for _, c := range []struct {
		name      string
		time, qty float64
		per       float64
	}{
		{"link", p.LinkSeconds, p.Bytes, res.LinkBytesPerSec},
		{"storage", p.StorageSeconds, p.StorageCPUSeconds, res.StorageCores},
		{"compute", p.ComputeSeconds, p.ComputeCPUSeconds, res.ComputeCores},
	} {
		if c.qty <= 0 || math.Abs(c.time-c.qty/c.per) > 1e-9*c.time {
			t.Errorf("%s: %v s for %v over %v", c.name, c.time, c.qty, c.per)
		}
	}
	if top := max(p.LinkSeconds, p.StorageSeconds, p.ComputeSeconds, p.GPUSeconds); top != p.Seconds {
		t.Errorf("epoch %v s, largest resource time %v s", p.Seconds, top)
	}

	bare := &Run{h: h, pl: &Planner{Name: policy.NameOptimal, Res: res}, cat: &Catalog{}}
	var nooff report.EpochReport
	if err := bare.Next(0, 0).Annotate(&nooff, quietEpoch{}); err != nil {
		t.Fatal(err)
	}
	if nooff.Prediction != nil {
		t.Errorf("an epoch without a plan has a prediction: %+v", nooff.Prediction)
	}
}
