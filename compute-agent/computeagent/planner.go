package computeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
)

// A policy run (Config.Policy):
//
//  1. Stage 1, before the first epoch: measure the link, storage CPU,
//     compute CPU and consumer rates (planner.Stage1) and decide, with
//     profiler.Stage1, whether the link bounds a No-Off epoch. The
//     decision is printed to Config.Out, logged and carried by the first
//     epoch's report. Where the first epoch is to be planned from header
//     estimates (below), stage 1 runs beside it instead (overlap.go).
//  2. Stage 2: a valid profile at Config.ProfilePath (same dataset
//     fingerprint and pipeline) is reused. Otherwise, unless
//     Config.ForceProfile, the first epoch runs the policy's plan made from
//     the profile estimated from the catalog's JPEG headers and calibrated
//     on stage 1's raw samples (planner.Estimate; report plan_source
//     "estimate"), from the moment it is ready (overlap.go); each planned epoch keeps what it measured of every
//     sample (its payload, the storage agent's CPU, the finishing CPU:
//     engine.Epoch.Observations), which refines the estimated profile
//     (profiler.Refine) for a new plan before the next epoch (plan_source
//     "measured"). The estimated profile is not saved. With
//     Config.ForceProfile, or where there is nothing to estimate from (a
//     catalog without headers), when stage 1 says so the first epoch runs
//     No-Off and its finishing workers record every sample with a
//     profiler.Recorder; the profile is saved to Config.ProfilePath. When
//     stage 1 finds another bottleneck and no profile exists, every epoch
//     runs No-Off, which offloading could not beat.
//  3. Plan: the policy turns the profile of this agent's shard and the
//     measured policy.Resources into a per-sample split and codec; samples
//     missing from the profile (failed, or not in a reused profile) get
//     k = 0. With several storage agents it plans on the cluster of them
//     (Resources.Over stage 1's per-agent rates and cores; each sample on
//     the agents that hold it) and also chooses which agent serves each
//     sample, which the fetchers prefer. Later epochs run the plan.
//  4. Measured resources: the profile keeps the running mean of the link
//     rate (from the whole profiling epoch, No-Off, and every link-bound
//     planned epoch) and of the storage speed (stage 1's, then every
//     planned epoch's offloads), and is saved after each epoch. A later
//     run that reuses the profile plans from these means rather than from
//     its own stage 1, whose few samples wobble from run to run.
//  5. Drift: after each planned epoch the measured link rate (bytes
//     received / epoch seconds) and the storage CPU of the offloaded
//     samples are compared with the plan's assumptions; when either is off
//     by more than Config.ReplanThreshold (the storage CPU: more than
//     planner.StorageCalibration) the Resources are updated and the next
//     epoch runs a new plan. The link rate only bounds the link from
//     below, so a lower rate counts as drift only when the plan predicted
//     the link to bound the epoch.

// Policies are the names Config.Policy accepts.
var Policies = policy.Names

// loadProfile returns the saved profile's samples of this shard and the
// whole saved profile, or nils when there is no valid profile for this
// dataset and pipeline at Config.ProfilePath or it holds none of this
// shard's samples.
func (a *Agent) loadProfile(cat *Catalog) (*profiler.Profile, *profiler.Profile) {
	path := a.cfg.ProfilePath
	if path == "" {
		return nil, nil
	}
	p, err := profiler.Load(path, cat.Fingerprint, a.pipeID)
	if err != nil {
		ev := a.log.Warn()
		if errors.Is(err, fs.ErrNotExist) {
			ev = a.log.Info()
		}
		ev.Err(err).Str("path", path).Msg("no saved profile to reuse: stage 2 decides")
		return nil, nil
	}
	out := *p
	out.Samples = nil
	w, r := uint64(a.cfg.World), uint64(a.cfg.Rank)
	for _, s := range p.Samples {
		if s.ID < cat.Total && s.ID%w == r {
			out.Samples = append(out.Samples, s)
		}
	}
	if len(out.Samples) == 0 {
		a.log.Warn().Str("path", path).Msg("saved profile holds none of this shard's samples: stage 2 decides")
		return nil, nil
	}
	a.log.Info().Str("path", path).Int("samples", len(out.Samples)).Msg("saved profile reused: stage 2 skipped")
	return &out, p
}

// policyRun is a policy run's state between epochs (Config.Policy; see
// the top of this file).
type policyRun struct {
	a       *Agent
	pl      *planner.Planner
	d       profiler.Decision // stage 1's
	summary report.Stage1Summary
	// noOff is the last measured No-Off epoch's time, for the guard: this
	// run's, or the one kept with a reused profile.
	noOff float64
	shard int // samples in the first epoch's shard, for stage 2
	cat   *Catalog
	// pending is stage 1 still to run, beside the first epoch (nil: it
	// ran before it, or has run).
	pending *stage1Job
	// recal is the estimate calibrated again on all the first epoch's
	// calibration files, for the later plans (overlap.go).
	recal *profiler.Profile
}

// startPolicy runs stage 1 and takes up a saved profile, ready for the
// policy run's first epoch. Without a saved profile, unless stage 2 is
// forced, and with a catalog of headers, stage 1 runs beside the first
// epoch instead (overlap.go).
func (a *Agent) startPolicy(ctx context.Context) (*policyRun, error) {
	cfg := &a.cfg
	fs, cat, err := a.storage(ctx)
	if err != nil {
		return nil, err
	}
	shard := schedule.Order(cfg.Seed, cfg.FirstEpoch, cfg.Rank, cfg.World, cat.Total)
	srcs := make([]planner.Source, len(fs))
	for i, f := range fs {
		srcs[i] = f
	}
	prof, saved := a.loadProfile(cat)
	s1 := a.stage1Config()
	s1.Quick = prof == nil && !cfg.ForceProfile && cat.HasHeaders()
	pl := &planner.Planner{Log: a.log, Threshold: cfg.ReplanThreshold, ProfilePath: cfg.ProfilePath, Name: cfg.Policy,
		Holds: func(node int, sample uint64) bool { return fs[node].Holds(sample) }, CacheBytes: a.plannedCacheBytes(),
		Areas: cat.CutAreas(cfg.Pipeline, cfg.Seed), Epoch: cfg.FirstEpoch, NoRefine: cfg.NoRefine}
	p := &policyRun{a: a, pl: pl, shard: len(shard), cat: cat}
	if s1.Quick {
		p.pending = &stage1Job{cfg: s1, srcs: srcs, shard: shard}
		return p, nil
	}
	st, err := planner.Stage1(ctx, s1, srcs, cat.RawSizes, shard)
	if err != nil {
		return nil, err
	}
	p.measured(st)
	if prof != nil {
		pl := p.pl
		pl.Prof, pl.Saved = prof, saved
		// Plan from the means kept with the profile, not this run's
		// stage 1 alone.
		pl.Res = pl.Res.WithMeasured(saved.Resources)
		if saved.Resources != nil {
			p.noOff = saved.Resources.NoOffSeconds
		}
		p.summary.Profile = report.ProfileLoaded
		pl.Source = report.PlanProfile
		if err := pl.Replan(); err != nil {
			return nil, configErr("%v", err)
		}
	} else if !cfg.ForceProfile {
		if err := p.estimate(st, shard); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// measured takes up stage 1's result st: its decision (logged and printed
// to Config.Out) and the resources it measured.
func (p *policyRun) measured(st planner.Stage1Result) {
	a, cfg := p.a, &p.a.cfg
	d := st.Decision
	a.log.Info().Str("policy", cfg.Policy).Str("bottleneck", d.Bottleneck).
		Float64("predicted_nooff_seconds", d.PredictedNoOffSeconds).Bool("stage2", d.RunStage2).
		Float64("link_bytes_per_sec", d.Rates.LinkBytesPerSec).Float64("compute_samples_per_sec", d.Rates.ComputeSamplesPerSec).
		Float64("storage_samples_per_sec", d.Rates.StorageSamplesPerSec).Float64("gpu_samples_per_sec", d.Rates.GPUSamplesPerSec).
		Float64("storage_speed", st.Res.StorageSpeed).Msg(d.String())
	if cfg.Out != nil {
		fmt.Fprintln(cfg.Out, d.String())
	}
	p.d, p.summary = d, st.Summary()
	p.pl.Res, p.pl.Nodes = st.Res, st.Nodes
}

// estimate plans the first epoch from the profile estimated from the
// catalog's headers, calibrated on stage 1's raw samples
// (planner.Estimate), when there is no saved profile and stage 2 is not
// forced. Where it cannot (no headers in the catalog, no calibration
// sample), the run goes on as without it: No-Off, and stage 2 when stage 1
// asks for it.
func (p *policyRun) estimate(st planner.Stage1Result, shard []uint64) error {
	t0 := p.a.cfg.Clock.Now()
	prof, omitted, err := planner.Estimate(p.estimateInput(st.Raws, shard))
	if err := p.planEstimate(prof, omitted, err, t0); err != nil {
		return err
	}
	if prof != nil {
		p.summary.Seconds += p.a.cfg.Clock.Now().Sub(t0).Seconds()
	}
	return nil
}

// estimateInput is planner.Estimate's input for the shard, calibrated on
// raws.
func (p *policyRun) estimateInput(raws map[uint64][]byte, shard []uint64) planner.EstimateInput {
	a, cat := p.a, p.cat
	return planner.EstimateInput{
		Pipeline: a.cfg.Pipeline, Seed: a.cfg.Seed, Epoch: a.cfg.FirstEpoch, Fingerprint: cat.Fingerprint,
		Shard: shard, RawSizes: cat.RawSizes, Header: cat.Header, Raws: raws,
		Limits: a.cfg.Settings.Limits(), OpTimeout: a.cfg.Settings.OpTimeout,
	}
}

// planEstimate plans from prof, the estimated profile (planner.Estimate's
// result, begun at t0), or logs why there is none (err).
func (p *policyRun) planEstimate(prof *profiler.Profile, omitted planner.Omitted, err error, t0 time.Time) error {
	a, pl := p.a, p.pl
	if err != nil {
		a.log.Warn().Err(err).Msg("no plan from header estimates: stage 2 decides")
		return nil
	}
	pl.Prof, pl.Est, pl.Source = prof, prof, report.PlanEstimate
	p.summary.Profile = report.ProfileEstimated
	if err := pl.Replan(); err != nil {
		return configErr("%v", err)
	}
	if omitted.Refused > 0 {
		a.log.Warn().Int("samples", omitted.Refused).AnErr("first", omitted.First).
			Msg("headers the limits refuse: planned as failures (raw, no cost), as every run of them fails")
	}
	a.log.Info().Int("samples", len(prof.Samples)).Int("unknown_headers", omitted.Unknown).Int("refused_headers", omitted.Refused).
		Float64("seconds", a.cfg.Clock.Now().Sub(t0).Seconds()).Msg("first epoch planned from header estimates")
	return nil
}

// next is the options of the policy run's i-th epoch, number num: No-Off
// (recording stage 2 when stage 1 asked for it) until there is a profile,
// then the current plan, re-planned for num's own crop boxes and after a
// drift (Planner.ForEpoch); a plan that cannot be made fails the epoch
// (epochOpts.err).
func (p *policyRun) next(i int, num uint64) epochOpts {
	if p.pending != nil {
		return p.overlapped(num)
	}
	pl, cfg := p.pl, &p.a.cfg
	if err := pl.ForEpoch(num); err != nil {
		return epochOpts{err: configErr("%v", err)}
	}
	opts := epochOpts{plan: planner.NewRunPlan(NoOff(), nil, policy.Resources{}), Opts: engine.Opts{LinkRate: pl.Res.LinkBytesPerSec, StorageCores: pl.Res.StorageCores}}
	predicted, bound, cacheBound := p.d.PredictedNoOffSeconds, 0.0, 0.0
	ran := pl.Prof != nil
	var planRan policy.Plan
	var cluster *policy.Cluster
	if e, ok := policy.Lookup(cfg.Policy); ok && e.Static == nil {
		opts.WarmCache = !ran // the first plan finds the cache filled
	}
	source := ""
	if ran {
		opts.plan, planRan, cluster = pl.Run, pl.Plan, pl.Cluster
		predicted, bound, cacheBound = pl.Plan.Pred.Seconds, pl.Bound, pl.CacheBound
		opts.Observe, source = pl.Est != nil, pl.Source
	} else if p.d.RunStage2 {
		opts.Rec = profiler.NewRecorder(cfg.Pipeline, p.cat.Fingerprint, int(p.cat.Total))
		opts.Rec.Limit(cfg.Settings.Limits(), cfg.Settings.OpTimeout)
		p.summary.Profile = report.ProfileRecorded
	}
	var sum *report.Stage1Summary
	if i == 0 {
		s := p.summary
		sum = &s
	}
	rec := opts.Rec
	opts.annotate = func(r *report.EpochReport, e *engine.Epoch) error {
		r.Policy, r.PredictedSeconds, r.BoundSeconds, r.Stage1, r.PlanSource = cfg.Policy, predicted, bound, sum, source
		r.CacheBoundSeconds = cacheBound
		predictNodes(r, cluster, planRan.Cluster)
		return p.annotate(r, e, rec, ran, planRan)
	}
	return opts
}

// predictNodes puts a cluster plan's prediction pr, made on c, into r:
// the cluster, and each storage agent's predicted load beside its
// measured share (by name). Nothing for a plan on pooled resources.
func predictNodes(r *report.EpochReport, c *policy.Cluster, pr *policy.ClusterPrediction) {
	if c == nil || pr == nil {
		return
	}
	r.Cluster = c
	for i := range r.ByStorage {
		for j, n := range c.Storage {
			if n.Name == r.ByStorage[i].Name && j < len(pr.Storage) {
				l := pr.Storage[j]
				r.ByStorage[i].Predicted = &report.StoragePrediction{Samples: l.Samples, Bytes: l.Bytes, CPUSeconds: l.CPUSeconds, CPUTime: l.CPUTime, EgressTime: l.EgressTime}
			}
		}
	}
}

// annotate completes a successful policy epoch's report and moves the
// plan on: stage 2's records (rec) become the profile, a planned epoch
// (ran with planRan) is checked for drift and against the guard, and a
// No-Off epoch's time is kept for the guard.
func (p *policyRun) annotate(r *report.EpochReport, e *engine.Epoch, rec *profiler.Recorder, ran bool, planRan policy.Plan) error {
	pl := p.pl
	switch {
	case rec != nil:
		r.Profiled = true
		pl.Res.StorageNSPerByte = r.StorageNSPerByte // the No-Off epoch sent every byte raw
		if err := pl.Adopt(rec, p.shard, r); err != nil {
			return configErr("%v", err)
		}
		if pl.Prof != nil {
			r.BoundSeconds = pl.Bound
		}
	case ran:
		// Refined costs re-plan even without drift; Learn also keeps
		// Drift from correcting the storage speed for what it corrected.
		r.Refined = pl.Learn(e.Observations())
		why, drifted := pl.Drift(r, (*planner.Offloads)(e.Offloads()), planRan)
		if r.Refined > 0 {
			why = strings.TrimPrefix(why+"; "+fmt.Sprintf("refined: %d samples measured", r.Refined), "; ")
			drifted = true
		}
		pl.Save()
		if g := pl.Guard(r, p.noOff); g != "" {
			why = strings.TrimPrefix(why+"; "+g, "; ")
		}
		if why != "" || drifted {
			// Re-planned once, for the epoch that runs next and its
			// boxes (next), not here for the one that ran.
			r.Replanned, r.ReplanReason = true, why
			pl.Invalidate()
			return nil
		}
	}
	if !ran || pl.Name == policy.NameNoOff {
		p.noOff = r.Seconds
		pl.Observe(profiler.MeasuredResources{NoOffSeconds: p.noOff})
		pl.Save()
	}
	return nil
}

// stage1Config is stage 1's view of the agent's configuration.
func (a *Agent) stage1Config() *planner.Stage1Config {
	cfg := &a.cfg
	return &planner.Stage1Config{
		Log: a.log, Now: cfg.Clock.Now, Pipeline: cfg.Pipeline, PipelineID: a.pipeID, PipelineSpec: a.pipeSpec,
		Seed: cfg.Seed, Epoch: cfg.FirstEpoch, Window: cfg.Window, MaxPayload: cfg.MaxPayload,
		Budget: cfg.ProfileBudget, Workers: cfg.Workers, Force: cfg.ForceProfile, GPURate: a.gpuRate(),
		Limits: cfg.Settings,
	}
}

// rated is a consumer that knows its rate.
type rated interface {
	// Rate is the samples per second consumed at batch size batch; zero
	// means unknown.
	Rate(batch int) float64
}

// gpuRate is the consumer's rate, zero (unlimited) when it does not say.
func (a *Agent) gpuRate() float64 {
	if r, ok := a.cfg.Consumer.(rated); ok {
		return r.Rate(a.cfg.Batch)
	}
	return 0
}
