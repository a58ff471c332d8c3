package planner

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/synthetic"
)

// TestRunFollowsShare: an epoch whose storage share moved since the plan
// (a job came) is planned for the new share, which offloads less, and its
// report says why; an unmoved share keeps the plan.
func TestRunFollowsShare(t *testing.T) {
	prof := synthetic.ProfileCut("openimages-like", 200, 3)
	res := policy.Resources{LinkBytesPerSec: 12.5e6, StorageCores: 1, ComputeCores: 4, StorageSpeed: 1, StorageNSPerByte: 3}
	share := []float64{1}
	h := &Host{Log: zerolog.Nop(), Now: time.Now, Policy: policy.NameOptimal, Job: "j",
		Shares: func() ([]float64, int) { return share, len(share) }}
	pl := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof}
	if err := pl.Replan(); err != nil {
		t.Fatal(err)
	}
	run := &Run{h: h, pl: pl, cat: &Catalog{}}
	epoch := func(i int) report.EpochReport {
		t.Helper()
		opts := run.Next(i, uint64(i))
		if opts.Err != nil {
			t.Fatal(opts.Err)
		}
		var r report.EpochReport
		if err := opts.Annotate(&r, quietEpoch{}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := epoch(1)
	alone := pl.Plan.Pred.StorageCPUSeconds
	if r.ShareReplan != "" || r.ShareCPUs != 1 || r.Job != "j" {
		t.Fatalf("alone: share %v, replan %q, job %q; want 1 core, none, j", r.ShareCPUs, r.ShareReplan, r.Job)
	}
	share = []float64{0.5}
	r = epoch(2)
	if r.ShareReplan == "" || r.ShareCPUs != 0.5 || pl.Res.StorageCores != 0.5 || r.Prediction.StorageCores != 0.5 {
		t.Fatalf("half: share %v, replan %q, planned for %v cores; want 0.5, a reason, 0.5", r.ShareCPUs, r.ShareReplan, pl.Res.StorageCores)
	}
	if half := pl.Plan.Pred.StorageCPUSeconds; !(half < alone) {
		t.Errorf("planned for half the cores the plan spends %v storage CPU s, alone %v: want less", half, alone)
	}
	if r = epoch(3); r.ShareReplan != "" {
		t.Errorf("an unmoved share re-planned: %q", r.ShareReplan)
	}
}
