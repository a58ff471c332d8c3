package planner

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
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
		Limits: oplimits.Default(), Stage1: &Stage1Config{},
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
