package computeagent

import (
	"context"
	"fmt"
	"slices"

	"github.com/sophon-dl/sophon/compute-agent/fetch"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/policy"
)

// Stage 1 beside the first epoch. A policy run that will plan its first
// epoch from header estimates (no saved profile, stage 2 not forced, a
// catalog with headers) does not wait for stage 1: the first epoch starts
// at once under No-Off, whose raw fetches need no measurement, and stage 1
// (planner.Stage1, Quick) runs beside it, then calibrates the estimate and
// plans (policyRun.estimate). The plan then takes over the positions no
// fetcher has requested yet (fetch.Epoch.Swap); those already requested
// keep their raw split, which yields the same tensor. The link probe shares
// the link with the epoch's raw fetches, so the link rate planned with is
// the two together: the probe's rate plus the epoch's bytes over the time
// since it began. The probe takes the shard from its end, which the epoch
// requests last, under the plan. The report says so (Stage1.Overlapped,
// PlanSwitchedAt), and the epoch's seconds include stage 1's.

// stage1Job is a stage 1 to run beside the first epoch.
type stage1Job struct {
	cfg   *planner.Stage1Config
	srcs  []planner.Source
	shard []uint64 // the first epoch's shard, in its order
}

// overlapped is the first epoch's options when stage 1 runs beside it
// (p.pending).
func (p *policyRun) overlapped() epochOpts {
	job, cfg := p.pending, &p.a.cfg
	p.pending = nil
	opts := epochOpts{Opts: fetch.Opts{Plan: planner.NewRunPlan(NoOff(), nil, policy.Resources{}), Observe: true}}
	if e, ok := policy.Lookup(cfg.Policy); ok && e.Static == nil {
		opts.WarmCache = true // the first plan finds the cache filled
	}
	var err error
	switched := -1
	opts.started = func(ctx context.Context, e *fetch.Epoch) func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			switched, err = p.planBeside(ctx, job, e)
		}()
		return func() { <-done }
	}
	opts.annotate = func(r *report.EpochReport, e *fetch.Epoch) error {
		if err != nil {
			return err
		}
		pl := p.pl
		sum := p.summary
		sum.Overlapped = true
		r.Policy, r.Stage1, r.PredictedSeconds = cfg.Policy, &sum, p.d.PredictedNoOffSeconds
		// Nothing left to plan when the epoch ended first: it ran No-Off
		// throughout, and the plan starts with the next epoch.
		ran := pl.Prof != nil && switched >= 0 && switched < r.Shard
		planRan := pl.Plan
		if ran {
			r.PredictedSeconds, r.BoundSeconds, r.PlanSource, r.PlanSwitchedAt = planRan.Pred.Seconds, pl.Bound, pl.Source, switched
			predictNodes(r, pl.Cluster, planRan.Cluster)
		} else if pl.Prof != nil {
			if r.Refined = pl.Learn(e.Observations()); r.Refined > 0 {
				r.Replanned, r.ReplanReason = true, fmt.Sprintf("refined: %d samples measured", r.Refined)
				if err := pl.Replan(); err != nil {
					return configErr("%v", err)
				}
			}
		}
		return p.annotate(r, e, nil, ran, planRan)
	}
	return opts
}

// planBeside runs job's stage 1 while e runs, plans from header estimates
// and hands e the plan for the positions not yet requested. It returns how
// many positions were requested before (-1: no plan, e runs No-Off to its
// end).
func (p *policyRun) planBeside(ctx context.Context, job *stage1Job, e *fetch.Epoch) (int, error) {
	a := p.a
	t0, b0 := a.cfg.Clock.Now(), e.BytesReceived()
	back := slices.Clone(job.shard)
	slices.Reverse(back)
	st, err := planner.Stage1(ctx, job.cfg, job.srcs, p.cat.RawSizes, back)
	if err != nil {
		return -1, err
	}
	if dt := a.cfg.Clock.Now().Sub(t0).Seconds(); dt > 0 {
		// The epoch's raw fetches shared the link with the probe.
		st.Res.LinkBytesPerSec += float64(e.BytesReceived()-b0) / dt
	}
	p.measured(st)
	if err := p.estimate(st, job.shard); err != nil {
		return -1, err
	}
	pl := p.pl
	if pl.Prof == nil || pl.Run == nil {
		return -1, nil
	}
	splitOf := a.splitOf(pl.Run)
	k := func(s uint64) int {
		k, err := splitOf(s)
		if err != nil {
			return 0 // checked when planned; raw is always right
		}
		return k
	}
	return e.Swap(pl.Run, k, pl.Res.LinkBytesPerSec, pl.Res.StorageCores), nil
}
