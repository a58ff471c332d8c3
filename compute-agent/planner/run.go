package planner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/planner/stage1"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
)

// A policy run (Run, the compute agent's Config.Policy):
//
//  1. Stage 1, before the first epoch: measure the link, storage CPU,
//     compute CPU and consumer rates (stage1.Run) and decide, with
//     profiler.Stage1, whether the link bounds a No-Off epoch. The
//     decision is printed to Host.Out, logged and carried by the first
//     epoch's report. Where the first epoch is to be planned from header
//     estimates (below), stage 1 runs beside it instead (overlap.go).
//  2. Stage 2: a valid profile at Host.ProfilePath (same dataset
//     fingerprint and pipeline) is reused. Otherwise, unless
//     Host.ForceProfile, the first epoch runs the policy's plan made from
//     the profile estimated from the catalog's JPEG headers and calibrated
//     on stage 1's raw samples (Estimate; report plan_source "estimate"),
//     from the moment it is ready (overlap.go); each planned epoch keeps
//     what it measured of every sample (its payload, the storage agent's
//     CPU, the finishing CPU: Epoch.Observations), which refines the
//     estimated profile (profiler.Refine) for a new plan before the next
//     epoch (plan_source "measured"). The estimated profile is not saved.
//     With Host.ForceProfile, or where there is nothing to estimate from
//     (a catalog without headers), when stage 1 says so the first epoch
//     runs No-Off and its finishing workers record every sample with a
//     profiler.Recorder; the profile is saved to Host.ProfilePath. When
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
//     by more than Host.Threshold (the storage CPU: more than
//     StorageCalibration) the Resources are updated and the next epoch
//     runs a new plan. The link rate only bounds the link from below, so a
//     lower rate counts as drift only when the plan predicted the link to
//     bound the epoch.

// ErrPlan marks a plan that cannot be made or run: the policy refused
// its profile or resources, or a plan file or static plan does not fit
// the pipeline.
var ErrPlan = errors.New("planner: bad plan")

func planErr(err error) error { return fmt.Errorf("%w: %w", ErrPlan, err) }

// Host is what a policy run needs of the agent that runs it: its
// configuration, clock and logger, the catalog and the storage agents.
type Host struct {
	Log zerolog.Logger
	Now func() time.Time
	// Out, when set, is given stage 1's decision, a line.
	Out io.Writer
	// Policy names the policy (policy.Names).
	Policy string
	// Threshold is the relative drift that re-plans (Planner.Threshold).
	Threshold float64
	// Resplit configures the re-splits within a planned epoch that
	// follow the link (resplit.go).
	Resplit ResplitConfig
	// StrictOffload: the engine runs the plan's splits without shedding
	// (engine.Config.StrictOffload); the predictions are then the plan's
	// own (Planner.Shedding).
	StrictOffload bool
	ProfilePath   string
	// ForceProfile runs stage 2 even where the headers could be
	// estimated from; NoRefine keeps the estimated profile unrefined.
	ForceProfile, NoRefine bool
	Pipeline               *ops.Pipeline
	PipelineID             string
	Seed, FirstEpoch       uint64
	Rank, World            int
	// Limits bound every pipeline run of the estimate and of stage 2.
	Limits oplimits.Settings
	// CacheBytes is the cache budget the plans plan under (0: none).
	CacheBytes float64
	// Stage1 is stage 1's configuration; its Quick is set here.
	Stage1  *stage1.Config
	Catalog Catalog
	// Sources are the storage agents; Holds says whether node holds
	// sample.
	Sources []stage1.Source
	Holds   func(node int, sample uint64) bool
	// SplitOf is each sample's split under a plan as the agent runs it.
	SplitOf func(*RunPlan) func(sample uint64) (int, error)
	// Job is the job name the agent sends its storage agents (for the
	// report). Shares, when set, asks them again for this job's share
	// of their budgets (Sources' CPUs after it) and returns each one's,
	// in the order of Sources, and the most jobs one of them serves;
	// before each epoch's plan a share that moved re-plans.
	Job    string
	Shares func() (cores []float64, jobs int)
}

// Catalog is what a policy run reads of the dataset's catalog.
type Catalog struct {
	Fingerprint string
	Total       uint64
	RawSizes    []uint64
	// Header is a sample's JPEG header summary, if the catalog has it;
	// HasHeaders whether it has any.
	Header     func(sample uint64) (jpeg.Summary, bool)
	HasHeaders bool
	// Areas are the samples' crop areas (nil: no cut).
	Areas *profiler.CutAreas
}

// Epoch is what a policy run reads of, and does to, a running or
// finished epoch (the engine's).
type Epoch interface {
	BytesReceived() int64
	Observations() []profiler.Observation
	Offloads() *Offloads
	// Swap hands the epoch plan for the positions not yet requested, at
	// split, and returns how many were requested before.
	Swap(plan *RunPlan, split func(sample uint64) int, linkRate, cores float64) int
}

// EpochOpts are what a policy run sets of one epoch.
type EpochOpts struct {
	Plan *RunPlan
	// LinkRate and StorageCores are the planner's (0: unknown).
	LinkRate, StorageCores float64
	// WarmCache fills the planned cache with the epoch's raw fetches;
	// Observe keeps what the epoch saw of each sample (Epoch.Observations).
	WarmCache, Observe bool
	// Rec, when set, records stage 2's profile.
	Rec *profiler.Recorder
	// KeepRaw, when set, is given the raw files that arrived; First
	// orders the epoch's first requests.
	KeepRaw func(sample uint64, raw []byte)
	First   func(sample uint64) float64
	// Annotate, when set, completes a successful epoch's report.
	Annotate func(*report.EpochReport, Epoch) error
	// Started, when set, is called once the epoch is prepared, with a
	// context that ends when the epoch failed and a channel closed when
	// its run ended; what it returns is waited for before Annotate.
	Started func(ctx context.Context, e Epoch, ended <-chan struct{}) (wait func())
	// Err, when set, fails the epoch before it starts.
	Err error
}

// loadProfile returns the saved profile's samples of this shard and the
// whole saved profile, or nils when there is no valid profile for this
// dataset and pipeline at Host.ProfilePath or it holds none of this
// shard's samples.
func (h *Host) loadProfile() (*profiler.Profile, *profiler.Profile) {
	path := h.ProfilePath
	if path == "" {
		return nil, nil
	}
	p, err := profiler.Load(path, h.Catalog.Fingerprint, h.PipelineID)
	if err != nil {
		ev := h.Log.Warn()
		if errors.Is(err, fs.ErrNotExist) {
			ev = h.Log.Info()
		}
		ev.Err(err).Str("path", path).Msg("no saved profile to reuse: stage 2 decides")
		return nil, nil
	}
	out := *p
	out.Samples = nil
	w, r := uint64(h.World), uint64(h.Rank)
	for _, s := range p.Samples {
		if s.ID < h.Catalog.Total && s.ID%w == r {
			out.Samples = append(out.Samples, s)
		}
	}
	if len(out.Samples) == 0 {
		h.Log.Warn().Str("path", path).Msg("saved profile holds none of this shard's samples: stage 2 decides")
		return nil, nil
	}
	h.Log.Info().Str("path", path).Int("samples", len(out.Samples)).Msg("saved profile reused: stage 2 skipped")
	return &out, p
}

// Run is a policy run's state between epochs (see the top of this file).
type Run struct {
	h       *Host
	pl      *Planner
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
	// share and jobs are the storage share and jobs the last Next saw.
	share float64
	jobs  int
}

// Start runs stage 1 and takes up a saved profile, ready for the policy
// run's first epoch, whose shard is shard. Without a saved profile,
// unless stage 2 is forced, and with a catalog of headers, stage 1 runs
// beside the first epoch instead (overlap.go).
func Start(ctx context.Context, h *Host, shard []uint64) (*Run, error) {
	cat := &h.Catalog
	prof, saved := h.loadProfile()
	s1 := h.Stage1
	s1.Quick = prof == nil && !h.ForceProfile && cat.HasHeaders
	pl := &Planner{Log: h.Log, Threshold: h.Threshold, ProfilePath: h.ProfilePath, Name: h.Policy,
		Holds: h.Holds, CacheBytes: h.CacheBytes, Areas: cat.Areas, Epoch: h.FirstEpoch, NoRefine: h.NoRefine, Shedding: !h.StrictOffload}
	p := &Run{h: h, pl: pl, shard: len(shard), cat: cat}
	if s1.Quick {
		p.pending = &stage1Job{cfg: s1, srcs: h.Sources, shard: shard}
		return p, nil
	}
	st, err := stage1.Run(ctx, s1, h.Sources, cat.RawSizes, shard)
	if err != nil {
		return nil, err
	}
	p.measured(st)
	if prof != nil {
		p.reuse(prof, saved)
		if err := pl.Replan(); err != nil {
			return nil, planErr(err)
		}
	} else if !h.ForceProfile {
		if err := p.estimate(st, shard); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// reuse takes up prof, this shard's samples of the saved profile saved,
// to plan from the means kept with it, not this run's stage 1 alone.
func (p *Run) reuse(prof, saved *profiler.Profile) {
	pl := p.pl
	pl.Prof, pl.Saved = prof, saved
	if saved.Resources == nil || !(saved.Resources.StorageSpeed > 0) {
		// No epoch measured the storage side against this profile yet:
		// stage 1's probe, priced on the profile's clock.
		if rse, ok := pl.ProbeSpeed(prof); ok {
			p.summary.StorageSpeed, p.summary.StorageSpeedRSE = pl.Res.StorageSpeed, rse
		}
	}
	pl.Res = pl.Res.WithMeasured(saved.Resources)
	if saved.Resources != nil {
		p.noOff = saved.Resources.NoOffSeconds
	}
	p.summary.Profile = report.ProfileLoaded
	pl.Source = report.PlanProfile
}

// measured takes up stage 1's result st: its decision (logged and printed
// to Host.Out) and the resources it measured.
func (p *Run) measured(st stage1.Result) {
	h := p.h
	d := st.Decision
	h.Log.Info().Str("policy", h.Policy).Str("bottleneck", d.Bottleneck).
		Float64("predicted_nooff_seconds", d.PredictedNoOffSeconds).Bool("stage2", d.RunStage2).
		Float64("link_bytes_per_sec", d.Rates.LinkBytesPerSec).Float64("compute_samples_per_sec", d.Rates.ComputeSamplesPerSec).
		Float64("storage_samples_per_sec", d.Rates.StorageSamplesPerSec).Float64("gpu_samples_per_sec", d.Rates.GPUSamplesPerSec).
		Float64("storage_speed", st.Res.StorageSpeed).Msg(d.String())
	if h.Out != nil {
		fmt.Fprintln(h.Out, d.String())
	}
	p.d, p.summary = d, st.Summary()
	p.pl.Res, p.pl.Nodes, p.pl.Probe = st.Res, st.Nodes, st.Probe
}

// estimate plans the first epoch from the profile estimated from the
// catalog's headers, calibrated on stage 1's raw samples (Estimate), when
// there is no saved profile and stage 2 is not forced. Where it cannot
// (no headers in the catalog, no calibration sample), the run goes on as
// without it: No-Off, and stage 2 when stage 1 asks for it.
func (p *Run) estimate(st stage1.Result, shard []uint64) error {
	t0 := p.h.Now()
	prof, omitted, err := Estimate(p.estimateInput(st.Raws, shard))
	if err := p.planEstimate(prof, omitted, err, t0); err != nil {
		return err
	}
	if prof != nil {
		p.summary.Seconds += p.h.Now().Sub(t0).Seconds()
	}
	return nil
}

// estimateInput is Estimate's input for the shard, calibrated on raws.
func (p *Run) estimateInput(raws map[uint64][]byte, shard []uint64) EstimateInput {
	h, cat := p.h, p.cat
	return EstimateInput{
		Pipeline: h.Pipeline, Seed: h.Seed, Epoch: h.FirstEpoch, Fingerprint: cat.Fingerprint,
		Shard: shard, RawSizes: cat.RawSizes, Header: cat.Header, Raws: raws,
		Limits: h.Limits.Limits(), OpTimeout: h.Limits.OpTimeout,
	}
}

// planEstimate plans from prof, the estimated profile (Estimate's result,
// begun at t0), or logs why there is none (err).
func (p *Run) planEstimate(prof *profiler.Profile, omitted Omitted, err error, t0 time.Time) error {
	h, pl := p.h, p.pl
	if err != nil {
		h.Log.Warn().Err(err).Msg("no plan from header estimates: stage 2 decides")
		return nil
	}
	pl.Prof, pl.Est, pl.Source = prof, prof, report.PlanEstimate
	p.summary.Profile = report.ProfileEstimated
	if err := pl.Replan(); err != nil {
		return planErr(err)
	}
	if omitted.Refused > 0 {
		h.Log.Warn().Int("samples", omitted.Refused).AnErr("first", omitted.First).
			Msg("headers the limits refuse: planned as failures (raw, no cost), as every run of them fails")
	}
	h.Log.Info().Int("samples", len(prof.Samples)).Int("unknown_headers", omitted.Unknown).Int("refused_headers", omitted.Refused).
		Float64("seconds", h.Now().Sub(t0).Seconds()).Msg("first epoch planned from header estimates")
	return nil
}

// Next is the options of the policy run's i-th epoch, number num: No-Off
// (recording stage 2 when stage 1 asked for it) until there is a profile,
// then the current plan, re-planned for num's own crop boxes and after a
// drift (Planner.ForEpoch); a plan that cannot be made fails the epoch
// (EpochOpts.Err).
func (p *Run) Next(i int, num uint64) EpochOpts {
	shareReplan := p.followShare()
	if p.pending != nil {
		return p.withShare(p.overlapped(num), "")
	}
	pl, h := p.pl, p.h
	if err := pl.ForEpoch(num); err != nil {
		return EpochOpts{Err: planErr(err)}
	}
	opts := EpochOpts{Plan: NewRunPlan(NoOff(), nil, policy.Resources{}), LinkRate: pl.Res.LinkBytesPerSec, StorageCores: pl.Res.StorageCores}
	predicted, bound, cacheBound := p.d.PredictedNoOffSeconds, 0.0, 0.0
	ran := pl.Prof != nil
	var planRan policy.Plan
	var cluster *policy.Cluster
	if e, ok := policy.Lookup(h.Policy); ok && e.Static == nil {
		opts.WarmCache = !ran // the first plan finds the cache filled
	}
	source := ""
	var pred *report.Prediction
	if ran {
		opts.Plan, planRan, cluster = pl.Run, pl.Plan, pl.Cluster
		predicted, bound, cacheBound = pl.Expected.Seconds, pl.Bound, pl.CacheBound
		pred = pl.account()
		opts.Observe, source = pl.Est != nil, pl.Source
	} else if p.d.RunStage2 {
		opts.Rec = profiler.NewRecorder(h.Pipeline, p.cat.Fingerprint, int(p.cat.Total))
		opts.Rec.Limit(h.Limits.Limits(), h.Limits.OpTimeout)
		p.summary.Profile = report.ProfileRecorded
	}
	var sum *report.Stage1Summary
	if i == 0 {
		s := p.summary
		sum = &s
	}
	rec := opts.Rec
	var peak, last float64
	var resplits []report.Resplit
	if ran {
		// A planned epoch meters its link: its busiest second is
		// about a floor on the link's capacity (Planner.driftLink).
		// Its plan follows the link (follow), unless Resplit.Off.
		opts.Started = func(ctx context.Context, e Epoch, ended <-chan struct{}) func() {
			meter, stop := stage1.StartLinkMeter(h.Now, e.BytesReceived)
			followed := make(chan struct{})
			if h.Resplit.Off {
				close(followed)
			} else {
				began := h.Now()
				go func() {
					defer close(followed)
					resplits, last = p.follow(ctx, e, ended, p.shard, began)
				}()
			}
			return func() {
				stop()
				<-followed
				peak = meter.Peak()
			}
		}
	}
	opts.Annotate = func(r *report.EpochReport, e Epoch) error {
		r.Policy, r.PredictedSeconds, r.BoundSeconds, r.Stage1, r.PlanSource = h.Policy, predicted, bound, sum, source
		r.LinkPeakBytesPerSec = peak
		r.CacheBoundSeconds, r.Prediction = cacheBound, pred
		r.Resplits = resplits
		predictNodes(r, cluster, planRan.Cluster)
		if err := p.annotate(r, e, rec, ran, planRan); err != nil {
			return err
		}
		p.afterResplits(r, last)
		return nil
	}
	return p.withShare(opts, shareReplan)
}

// followShare asks the storage agents for this job's share of their
// budgets (Host.Shares) and, when it moved from the one the plan was made
// for (jobs came or went), takes it up and marks the plan out of date:
// the epoch about to run is planned for the new share. It returns why it
// did ("" when it did not).
func (p *Run) followShare() string {
	h, pl := p.h, p.pl
	if h.Shares == nil {
		return ""
	}
	cores, jobs := h.Shares()
	total := 0.0
	for _, c := range cores {
		total += c
	}
	p.share, p.jobs = total, jobs
	old := pl.Res.StorageCores
	if !(total > 0) || !(old > 0) || math.Abs(total-old) <= shareMoved*old {
		h.Log.Info().Str("job", h.Job).Float64("share_cores", total).Int("jobs", jobs).Msg("storage share")
		return ""
	}
	pl.Res.StorageCores = total
	for i := range pl.Nodes {
		if i < len(cores) && cores[i] > 0 {
			pl.Nodes[i].Cores = cores[i]
		}
	}
	pl.Invalidate()
	why := fmt.Sprintf("storage share %.3g -> %.3g cores (%d jobs)", old, total, jobs)
	h.Log.Info().Str("job", h.Job).Float64("old_cores", old).Float64("share_cores", total).Int("jobs", jobs).
		Msg("storage share changed: re-planning for it")
	return why
}

// shareMoved is the relative change of the storage share that re-plans.
const shareMoved = 0.01

// withShare has opts' report say the job, its share and why the epoch
// re-planned for it.
func (p *Run) withShare(opts EpochOpts, why string) EpochOpts {
	h := p.h
	if h.Job == "" && h.Shares == nil {
		return opts
	}
	share, jobs := p.share, p.jobs
	annotate := opts.Annotate
	opts.Annotate = func(r *report.EpochReport, e Epoch) error {
		r.Job, r.ShareCPUs, r.Jobs, r.ShareReplan = h.Job, share, jobs, why
		if annotate != nil {
			return annotate(r, e)
		}
		return nil
	}
	return opts
}

// afterResplits starts the next epoch's plan from last, the link rate the
// epoch's last re-split measured going up (0: none, or it went down).
func (p *Run) afterResplits(r *report.EpochReport, last float64) {
	if !(last > 0) {
		return
	}
	pl := p.pl
	pl.Res.LinkBytesPerSec, pl.linkPeaked = last, false
	pl.Invalidate()
	r.Replanned = true
	r.ReplanReason = strings.TrimPrefix(r.ReplanReason+"; "+fmt.Sprintf("re-split: the next plan starts from the link rate last measured, %.0f B/s", last), "; ")
}

// Account is the report's per-resource prediction of a plan predicted
// as pr under the resources res it was made with.
func Account(pr policy.Prediction, res policy.Resources) *report.Prediction {
	return &report.Prediction{
		Seconds: pr.Seconds, LinkSeconds: pr.LinkSeconds, StorageSeconds: pr.StorageSeconds,
		ComputeSeconds: pr.ComputeSeconds, GPUSeconds: pr.GPUSeconds, Bytes: pr.Bytes,
		StorageCPUSeconds: pr.StorageCPUSeconds, ComputeCPUSeconds: pr.ComputeCPUSeconds, Bottleneck: pr.Bottleneck,
		LinkBytesPerSec: res.LinkBytesPerSec, StorageCores: res.StorageCores, ComputeCores: res.ComputeCores,
		StorageSpeed: res.StorageSpeed, StorageNSPerByte: res.StorageNSPerByte, ComputeNSPerSample: res.ComputeNSPerSample,
	}
}

// account is the report's prediction of the current plan's epoch as the
// runtime runs it (Expected, under Res), with the plan's own epoch and
// the offloads shedding moves raw beside it.
func (pl *Planner) account() *report.Prediction {
	a := Account(pl.Expected, pl.Res)
	a.PlanSeconds, a.Shed = pl.Plan.Pred.Seconds, pl.ExpectedShed
	return a
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
func (p *Run) annotate(r *report.EpochReport, e Epoch, rec *profiler.Recorder, ran bool, planRan policy.Plan) error {
	pl := p.pl
	switch {
	case rec != nil:
		r.Profiled = true
		if err := pl.Adopt(rec, p.shard, r); err != nil {
			return planErr(err)
		}
		if pl.Prof != nil {
			r.BoundSeconds = pl.Bound
		}
	case ran:
		// Refined costs re-plan even without drift; Learn also keeps
		// Drift from correcting the storage speed for what it corrected.
		r.Refined = pl.Learn(e.Observations())
		why, drifted := pl.Drift(r, e.Offloads(), planRan)
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
			// boxes (Next), not here for the one that ran.
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
