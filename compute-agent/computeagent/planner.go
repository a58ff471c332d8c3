package computeagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strings"

	"github.com/sophon-dl/sophon/compute-agent/epoch"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
)

// A policy run (Config.Policy):
//
//  1. Stage 1, before the first epoch: measure the link, storage CPU,
//     compute CPU and consumer rates (stage1.go) and decide, with
//     profiler.Stage1, whether the link bounds a No-Off epoch. The
//     decision is printed to Config.Out, logged and carried by the first
//     epoch's report.
//  2. Stage 2: a valid profile at Config.ProfilePath (same dataset
//     fingerprint and pipeline) is reused; otherwise, when stage 1 says so
//     (or Config.ForceProfile), the first epoch runs No-Off and its
//     finishing workers record every sample with a profiler.Recorder; the
//     profile is saved to Config.ProfilePath. When stage 1 finds another
//     bottleneck and no profile exists, every epoch runs No-Off, which
//     offloading could not beat.
//  3. Plan: the policy turns the profile of this agent's shard and the
//     measured policy.Resources into a per-sample split and codec; samples
//     missing from the profile (failed, or not in a reused profile) get
//     k = 0. Later epochs run the plan.
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
//     StorageCalibration) the Resources are updated and the next epoch
//     runs a new plan. The link rate only bounds the link from
//     below, so a lower rate counts as drift only when the plan predicted
//     the link to bound the epoch.

// Policies are the names Config.Policy accepts.
var Policies = policy.Names

// planner holds a policy run's state between epochs.
type planner struct {
	a    *Agent
	name string
	res  policy.Resources
	prof *profiler.Profile // this shard's samples; nil until known
	// saved is the profile as saved at Config.ProfilePath (every shard's
	// samples), whose measured resources each epoch updates; nil when
	// there is none to update.
	saved *profiler.Profile
	plan  policy.Plan // valid when prof is set
	bound float64
	agent *runPlan // plan as the agent runs it
}

// replan plans with the current profile and resources.
func (pl *planner) replan() error {
	p, r := pl.prof, pl.res
	plan, err := policy.ByName(pl.name, p, r)
	if err != nil {
		return configErr("%v", err)
	}
	pl.plan = plan
	pl.bound = policy.Bound(p, r)
	pl.agent = newRunPlan(&plan, p, r) // its own copy: pl.plan changes at the next re-plan
	pr := pl.plan.Pred
	pl.a.log.Info().Str("policy", pl.name).Float64("predicted_seconds", pr.Seconds).Float64("bound_seconds", pl.bound).
		Str("bottleneck", pr.Bottleneck).Float64("bytes", pr.Bytes).Float64("storage_cpu_seconds", pr.StorageCPUSeconds).
		Float64("link_bytes_per_sec", r.LinkBytesPerSec).Float64("storage_speed", r.StorageSpeed).Float64("storage_ns_per_byte", r.StorageNSPerByte).Msg("planned")
	return nil
}

// StorageCalibration is the relative error of the plan's storage CPU
// estimate past which the next epoch re-plans, when it is below
// Config.ReplanThreshold. The storage CPU of the offloaded samples is
// measured exactly (each response carries its thread CPU time), while the
// estimate comes from stage 1's few samples and the profile's unfused op
// costs, so a planned epoch calibrates the storage speed ratio rather than
// waiting for a large drift.
const StorageCalibration = 0.05

// drift compares an epoch run with plan ran against the plan's
// assumptions, updates the resources where they drifted past the
// threshold, and reports whether it did (the next epoch then runs a new
// plan).
func (pl *planner) drift(r *report.EpochReport, e *epochRun, ran policy.Plan) (string, bool) {
	thr := pl.a.cfg.ReplanThreshold
	res := pl.res
	var why []string
	got := float64(e.storageOffEffNS.Load()) / 1e9
	if got <= 0 { // an agent that does not report budget time
		got = float64(e.storageOffNS.Load()) / 1e9
	}
	pred := ran.Pred.StorageCPUSeconds
	if planned := float64(e.offPlannedNS.Load()) / 1e9; planned > 0 {
		// Only what the storage agents ran as planned: offloads answered
		// raw (work-conserving offload) cost them next to nothing.
		pred = planned
	}
	if pred > 0 && got > 0 {
		ratio := got / pred
		if tol := min(thr, StorageCalibration); ratio > 1+tol || ratio < 1-tol {
			speed := res.StorageSpeed
			if speed <= 0 {
				speed = 1
			}
			res.StorageSpeed = speed / ratio
			why = append(why, fmt.Sprintf("storage cpu %.3fs, planned %.3fs", got, pred))
		}
	}
	if pred > 0 && got > 0 {
		speed := pl.res.StorageSpeed
		if speed <= 0 {
			speed = 1
		}
		pl.observe(profiler.MeasuredResources{StorageSpeed: speed * pred / got})
	}
	if r.Seconds > 0 && r.BytesReceived > 0 && res.LinkBytesPerSec > 0 {
		got := float64(r.BytesReceived) / r.Seconds
		if ran.Pred.Bottleneck == policy.Link {
			pl.observe(profiler.MeasuredResources{LinkBytesPerSec: got})
		}
		ratio := got / res.LinkBytesPerSec
		// A lower rate is the link's only when the link bound the epoch:
		// otherwise bytes over seconds measures whatever did (a storage
		// agent starved of CPU), and taking it for the link's capacity
		// makes the next plan offload more, which makes that worse. The
		// plan predicted the link to bound it, and the storage side was
		// not busy for most of the epoch.
		storageBusy := 0.0
		if cores := pl.res.StorageCores; cores > 0 && e != nil {
			storageBusy = float64(e.storageOffEffNS.Load()) / 1e9 / cores / r.Seconds
		}
		if ratio > 1+thr || (ratio < 1-thr && ran.Pred.Bottleneck == policy.Link && storageBusy < 0.8) {
			why = append(why, fmt.Sprintf("link %.0f B/s, planned %.0f B/s", got, res.LinkBytesPerSec))
			res.LinkBytesPerSec = got
		}
	}
	if m := r.StorageNSPerByte; m > 0 {
		// What sending costs the storage side (its process CPU beyond the
		// ops): under a CPU quota shared with a neighbour, it competes
		// with the ops for what is left.
		if old := res.StorageNSPerByte; old <= 0 || m/old > 1+thr || m/old < 1-thr {
			why = append(why, fmt.Sprintf("transport %.2f ns/B, planned %.2f ns/B", m, old))
			res.StorageNSPerByte = m
		}
	}
	if len(why) == 0 {
		return "", false
	}
	reason := "drift: " + strings.Join(why, "; ")
	pl.a.log.Info().Uint64("epoch", r.Epoch).Str("drift", reason).Msg("rates drifted: re-planning")
	pl.res = res
	return reason, true
}

// guard is the measured guard: a planned epoch slower than the last
// measured No-Off epoch (noOff seconds; 0 when none was measured) means
// the plan's model is wrong about something that matters, whatever the
// drift thresholds say, so the next epoch re-plans with the resources as
// this epoch updated them. It returns the reason, or "".
func (pl *planner) guard(r *report.EpochReport, noOff float64) string {
	if noOff <= 0 || pl.name == policy.NameNoOff || r.Seconds <= noOff {
		return ""
	}
	reason := fmt.Sprintf("guard: epoch took %.3f s, slower than No-Off's last measured %.3f s", r.Seconds, noOff)
	pl.a.log.Warn().Uint64("epoch", r.Epoch).Float64("seconds", r.Seconds).Float64("nooff_seconds", noOff).Msg("planned epoch slower than No-Off: re-planning")
	return reason
}

// observe folds one epoch's measurement into the saved profile's running
// means (an epoch's weight is 1 per field it measured). The link is the
// exception: a link carries at most its capacity, and an epoch that moved
// fewer bytes per second was bound by something else (the profiling epoch
// by stage 2's recording), so the saved link rate is the highest measured.
func (pl *planner) observe(obs profiler.MeasuredResources) {
	if pl.saved == nil {
		return
	}
	if pl.saved.Resources == nil {
		pl.saved.Resources = &profiler.MeasuredResources{}
	}
	m := pl.saved.Resources
	if link := obs.LinkBytesPerSec; link > 0 {
		m.LinkBytesPerSec = max(m.LinkBytesPerSec, link)
		obs.LinkBytesPerSec = 0
	}
	m.Update(obs, 1)
}

// save writes the profile with its updated means to Config.ProfilePath.
func (pl *planner) save() {
	path := pl.a.cfg.ProfilePath
	if pl.saved == nil || path == "" {
		return
	}
	if err := profiler.Save(path, pl.saved); err != nil {
		pl.a.log.Warn().Err(err).Str("path", path).Msg("profile not saved")
	}
}

// adopt turns stage 2's records into the run's profile, saves it and
// plans. A shard with no sample recorded keeps running No-Off. r is the
// profiling epoch's report: a No-Off epoch bound by the link (stage 1 said
// so), whose bytes over seconds is the link rate measured over a whole
// epoch.
func (pl *planner) adopt(rec *profiler.Recorder, shard int, r *report.EpochReport) error {
	a := pl.a
	prof := rec.Profile()
	a.log.Info().Int("recorded", len(prof.Samples)).Int("missing", shard-len(prof.Samples)).Msg("stage 2: profile recorded")
	if len(prof.Samples) == 0 {
		a.log.Warn().Msg("stage 2: no sample recorded; staying with No-Off")
		return nil
	}
	// The profiling epoch's bytes over seconds is a lower bound on the
	// link (stage 2's recording may have bound it); stage 1's probe is
	// another.
	obs := profiler.MeasuredResources{StorageSpeed: pl.res.StorageSpeed, NoOffSeconds: r.Seconds, LinkBytesPerSec: pl.res.LinkBytesPerSec}
	if r.Seconds > 0 && r.BytesReceived > 0 {
		obs.LinkBytesPerSec = max(obs.LinkBytesPerSec, float64(r.BytesReceived)/r.Seconds)
	}
	prof.Resources = &profiler.MeasuredResources{}
	prof.Resources.Update(obs, 1)
	pl.res = pl.res.WithMeasured(prof.Resources)
	if path := a.cfg.ProfilePath; path != "" {
		pl.saved = prof
		if err := profiler.Save(path, prof); err != nil {
			a.log.Warn().Err(err).Str("path", path).Msg("stage 2: profile not saved")
		} else {
			a.log.Info().Str("path", path).Msg("stage 2: profile saved")
		}
	}
	pl.prof = prof
	return pl.replan()
}

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
	pl      *planner
	d       profiler.Decision // stage 1's
	summary report.Stage1Summary
	// noOff is the last measured No-Off epoch's time, for the guard: this
	// run's, or the one kept with a reused profile.
	noOff float64
	shard int // samples in the first epoch's shard, for stage 2
	cat   *Catalog
}

// startPolicy runs stage 1 and takes up a saved profile, ready for the
// policy run's first epoch.
func (a *Agent) startPolicy(ctx context.Context) (*policyRun, error) {
	cfg := &a.cfg
	fs, cat, err := a.storage(ctx)
	if err != nil {
		return nil, err
	}
	shard := epoch.Order(cfg.Seed, cfg.FirstEpoch, cfg.Rank, cfg.World, cat.Total)
	st, err := a.stage1(ctx, fs, cat, shard)
	if err != nil {
		return nil, err
	}
	d := st.decision
	a.log.Info().Str("policy", cfg.Policy).Str("bottleneck", d.Bottleneck).
		Float64("predicted_nooff_seconds", d.PredictedNoOffSeconds).Bool("stage2", d.RunStage2).
		Float64("link_bytes_per_sec", d.Rates.LinkBytesPerSec).Float64("compute_samples_per_sec", d.Rates.ComputeSamplesPerSec).
		Float64("storage_samples_per_sec", d.Rates.StorageSamplesPerSec).Float64("gpu_samples_per_sec", d.Rates.GPUSamplesPerSec).
		Float64("storage_speed", st.res.StorageSpeed).Msg(d.String())
	if cfg.Out != nil {
		fmt.Fprintln(cfg.Out, d.String())
	}
	p := &policyRun{pl: &planner{a: a, name: cfg.Policy, res: st.res}, d: d, summary: st.summary(), shard: len(shard), cat: cat}
	if prof, saved := a.loadProfile(cat); prof != nil {
		pl := p.pl
		pl.prof, pl.saved = prof, saved
		// Plan from the means kept with the profile, not this run's
		// stage 1 alone.
		pl.res = pl.res.WithMeasured(saved.Resources)
		if saved.Resources != nil {
			p.noOff = saved.Resources.NoOffSeconds
		}
		p.summary.Profile = report.ProfileLoaded
		if err := pl.replan(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// next is the options of the policy run's i-th epoch: No-Off (recording
// stage 2 when stage 1 asked for it) until there is a profile, then the
// current plan.
func (p *policyRun) next(i int) epochOpts {
	pl, cfg := p.pl, &p.pl.a.cfg
	opts := epochOpts{plan: newRunPlan(NoOff(), nil, policy.Resources{}), linkRate: pl.res.LinkBytesPerSec, storageCores: pl.res.StorageCores}
	predicted, bound := p.d.PredictedNoOffSeconds, 0.0
	ran := pl.prof != nil
	var planRan policy.Plan
	if ran {
		opts.plan, planRan = pl.agent, pl.plan
		predicted, bound = pl.plan.Pred.Seconds, pl.bound
	} else if p.d.RunStage2 {
		opts.rec = profiler.NewRecorder(cfg.Pipeline, p.cat.Fingerprint, int(p.cat.Total))
		p.summary.Profile = report.ProfileRecorded
	}
	var sum *report.Stage1Summary
	if i == 0 {
		s := p.summary
		sum = &s
	}
	rec := opts.rec
	opts.annotate = func(r *report.EpochReport, e *epochRun) error {
		r.Policy, r.PredictedSeconds, r.BoundSeconds, r.Stage1 = cfg.Policy, predicted, bound, sum
		return p.annotate(r, e, rec, ran, planRan)
	}
	return opts
}

// annotate completes a successful policy epoch's report and moves the
// plan on: stage 2's records (rec) become the profile, a planned epoch
// (ran with planRan) is checked for drift and against the guard, and a
// No-Off epoch's time is kept for the guard.
func (p *policyRun) annotate(r *report.EpochReport, e *epochRun, rec *profiler.Recorder, ran bool, planRan policy.Plan) error {
	pl := p.pl
	switch {
	case rec != nil:
		r.Profiled = true
		pl.res.StorageNSPerByte = r.StorageNSPerByte // the No-Off epoch sent every byte raw
		if err := pl.adopt(rec, p.shard, r); err != nil {
			return err
		}
		if pl.prof != nil {
			r.BoundSeconds = pl.bound
		}
	case ran:
		why, drifted := pl.drift(r, e, planRan)
		pl.save()
		if g := pl.guard(r, p.noOff); g != "" {
			why = strings.TrimPrefix(why+"; "+g, "; ")
		}
		if why != "" || drifted {
			r.Replanned, r.ReplanReason = true, why
			return pl.replan()
		}
	}
	if !ran || pl.name == policy.NameNoOff {
		p.noOff = r.Seconds
		pl.observe(profiler.MeasuredResources{NoOffSeconds: p.noOff})
		pl.save()
	}
	return nil
}

// runPlan is a plan (a *policy.Plan) indexed for running: by sample id,
// its split and codec and, for a policy's plan, the planner's hints for
// work-conserving admission (FetchRequest.priority, cost_ns) and pacing.
type runPlan struct {
	plan *policy.Plan
	// byID lists the plan's entries in ascending id order; nil when its
	// IDs ascend already.
	byID []int32
	// prio and cost, per entry (nil: the plan has no profile behind it):
	// bytes saved per storage CPU-ms and storage CPU ns of the sample's
	// offload on the profile's clock (0 for raw). cost is not scaled by
	// the planner's storage speed: the storage agent learns its own ratio
	// of budget time to these estimates, which a re-plan's new speed
	// would otherwise count twice.
	prio []uint32
	cost []uint64
	// speed is the planner's storage speed (1 without a profile).
	speed float64
}

// newRunPlan indexes pl, a checked plan. With a profile p (the one pl was
// made from: entry i is p.Samples[i]) and the resources r it was made
// under, it also computes each offload's hints; pl's codecs then decide
// every request's (see runPlan.codec).
func newRunPlan(pl *policy.Plan, p *profiler.Profile, r policy.Resources) *runPlan {
	out := &runPlan{plan: pl, speed: 1}
	if !slices.IsSorted(pl.IDs) {
		out.byID = make([]int32, len(pl.IDs))
		for i := range out.byID {
			out.byID[i] = int32(i)
		}
		slices.SortStableFunc(out.byID, func(x, y int32) int { return cmp.Compare(pl.IDs[x], pl.IDs[y]) })
	}
	if p == nil {
		return out
	}
	if r.StorageSpeed > 0 {
		out.speed = r.StorageSpeed
	}
	n := len(pl.Split)
	out.prio, out.cost = make([]uint32, n), make([]uint64, n)
	for i := range min(n, len(p.Samples)) {
		s := &p.Samples[i]
		zstd := pl.Compress != nil && pl.Compress[i]
		if bytes, ns, ok := offloadCost(s, pl.Split[i], zstd); ok && ns > 0 {
			out.cost[i] = uint64(ns)
			if saved := float64(s.Raw) - bytes; saved > 0 {
				out.prio[i] = uint32(min(saved/(ns/1e6), math.MaxUint32))
			}
		}
	}
	return out
}

// name is the plan's name in reports.
func (p *runPlan) name() string { return p.plan.Policy }

// entry is the index of sample's entry in the plan, if it has one.
func (p *runPlan) entry(sample uint64) (int, bool) {
	ids := p.plan.IDs
	if p.byID == nil {
		return slices.BinarySearch(ids, sample)
	}
	j, ok := slices.BinarySearchFunc(p.byID, sample, func(i int32, s uint64) int { return cmp.Compare(ids[i], s) })
	if !ok {
		return 0, false
	}
	return int(p.byID[j]), true
}

// split is sample's split, checked against p and n ops.
func (p *runPlan) split(sample uint64, pipe *ops.Pipeline, n int) (int, error) {
	k := p.plan.Default
	if i, ok := p.entry(sample); ok {
		k = p.plan.Split[i]
	}
	if err := validSplit(pipe, k, n); err != nil {
		return 0, fmt.Errorf("%w: plan %s: sample %d: %v", ErrConfig, p.name(), sample, err)
	}
	return k, nil
}

// hint is the sample's priority (bytes saved per storage CPU-ms) and
// storage CPU estimate (ns on the profile's clock); zeros for raw and for
// a plan without a profile.
func (p *runPlan) hint(sample uint64) (uint32, uint64) {
	if p.prio == nil {
		return 0, 0
	}
	if i, ok := p.entry(sample); ok {
		return p.prio[i], p.cost[i]
	}
	return 0, 0
}

// hinted reports whether the plan carries the planner's hints (it was
// made from a profile).
func (p *runPlan) hinted() bool { return p.prio != nil }

// offloadCost is what sample s's offload at split k (compressed when zstd)
// sends and costs the storage side on the profile's clock: the payload
// bytes and the ns of the ops (or the cut, or the compression) it runs
// there. ok is false for raw (k = 0 uncompressed) and for a split the
// profile has no data for.
func offloadCost(s *profiler.SampleProfile, k int, zstd bool) (bytes, ns float64, ok bool) {
	if k == policy.SplitCut {
		return float64(s.CutBytes), float64(s.CutNS), s.HasCut()
	}
	if k < 0 || k >= len(s.Bytes) || k > len(s.OpNS) || (k == 0 && !zstd) {
		return 0, 0, false
	}
	for _, op := range s.OpNS[:k] {
		ns += float64(op)
	}
	bytes = float64(s.Bytes[k])
	if zstd && k < len(s.Compressed) && k < len(s.CompressNS) {
		bytes, ns = float64(s.Compressed[k]), ns+float64(s.CompressNS[k])
	}
	return bytes, ns, true
}

// codec is the codec requested for sample: a policy's plan decides it
// (zstd where the plan compresses the sample, else none); for other plans
// it is Config.Codec.
func (e *epochRun) codec(sample uint64) ops.Codec {
	if !e.plan.hinted() {
		return e.cfg.Codec
	}
	if i, ok := e.plan.entry(sample); ok && e.plan.plan.Compress != nil && e.plan.plan.Compress[i] {
		return ops.CodecZstd
	}
	return ops.CodecNone
}
