package planner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/planner/stage1"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
)

// Stage 1 beside the first epoch. A policy run that will plan its first
// epoch from header estimates (no saved profile, stage 2 not forced, a
// catalog with headers) does not wait for stage 1: the first epoch starts
// at once under a provisional plan that needs no measurement (provisional)
// and stage 1 runs beside it on what the epoch measures
// (stage1.RunBeside): the link rate is the epoch's own (stage1.LinkMeter),
// the calibration samples are the raw files of its first positions
// (EpochOpts.KeepRaw), and only the storage CPU's few samples at the crop
// split (stage1.ProbeStorage) are fetched apart. The provisional plan's
// requests go cheapest first (Cheapest). Then the estimate is calibrated and the plan made
// (Run.estimate), and the plan takes over the positions no fetcher
// has requested yet (Epoch.Swap); those already requested keep the
// split they went out at, which yields the same tensor. The report says
// so (Stage1.Overlapped, PlanSwitchedAt), and the epoch's seconds include
// stage 1's.

// ProvisionalName names the provisional plan.
const ProvisionalName = "provisional"

// BesideCalibration is how many raw files of the first epoch calibrate the
// estimate its plan is made from: the first to arrive of its first
// positions, fetched raw under the provisional plan. Half of
// CalibrationSamples, for an early plan; the estimate the next
// epochs refine is calibrated again on all of them (recalibrate).
const BesideCalibration = 8

// relinkAfter is how long after the plan took over the first epoch the
// link rate is measured again; relinkMargin how much higher it must be for
// a new plan for the rest of the epoch.
const (
	relinkAfter  = 500 * time.Millisecond
	relinkMargin = 1.1
)

// stage1Job is a stage 1 to run beside the first epoch.
type stage1Job struct {
	cfg   *stage1.Config
	srcs  []stage1.Source
	shard []uint64 // the first epoch's shard, in its order
}

// provisional is the first epoch's plan until the estimate's plan is
// ready: the calibration samples raw (calib, CalibrationSet, which
// go out first) and every other sample cut to its crop box in the JPEG
// domain where the pipeline can cut (never more bytes than the file, the
// cheapest offload, which the storage agent answers raw when its CPU
// falls behind), else raw.
func (p *Run) provisional(calib map[uint64]bool) *RunPlan {
	def := 0
	if p.h.Pipeline.CanCut() {
		def = ops.SplitCut
	}
	raw := map[uint64]int{}
	for s := range calib {
		raw[s] = 0
	}
	return NewRunPlan(PlanOf(ProvisionalName, p.h.PipelineID, def, raw), nil, policy.Resources{})
}

// overlapped is the first epoch's options, epoch num, when stage 1 runs
// beside it (p.pending).
func (p *Run) overlapped(num uint64) EpochOpts {
	job, h := p.pending, p.h
	p.pending = nil
	raws := make(chan stage1.RawFile, CalibrationSamples)
	calib := CalibrationSet(job.shard, p.cat.RawSizes,
		Calibratable(h.Pipeline, p.cat.Header, h.Limits.Limits()))
	opts := EpochOpts{Plan: p.provisional(calib), Observe: true, KeepRaw: func(s uint64, b []byte) {
		select {
		case raws <- stage1.RawFile{Sample: s, Raw: b}:
		default: // enough kept
		}
	}, First: Cheapest(p.pl.Areas, p.cat.RawSizes, num, calib)}
	if e, ok := policy.Lookup(h.Policy); ok && e.Static == nil {
		opts.WarmCache = true // the first plan finds the cache filled
	}
	var err error
	switched := -1
	opts.Started = func(ctx context.Context, e Epoch, ended <-chan struct{}) func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			switched, err = p.planBeside(ctx, job, e, stage1.Beside{Raws: raws, Ended: ended})
		}()
		return func() { <-done }
	}
	opts.Annotate = func(r *report.EpochReport, e Epoch) error {
		if err != nil {
			return err
		}
		return p.annotateOverlapped(r, e, switched)
	}
	return opts
}

// annotateOverlapped completes the report of a first epoch with stage 1
// beside it, whose plan took over after switched positions (-1: never).
func (p *Run) annotateOverlapped(r *report.EpochReport, e Epoch, switched int) error {
	pl := p.pl
	if p.recal != nil {
		pl.Est = p.recal // what Learn refines from now on
	}
	sum := p.summary
	sum.Overlapped = true
	r.Policy, r.Stage1, r.PredictedSeconds = p.h.Policy, &sum, p.d.PredictedNoOffSeconds
	// Nothing left to plan when the epoch ended first: it ran the
	// provisional plan throughout, and the plan starts with the next epoch.
	ran := pl.Prof != nil && switched >= 0 && switched < r.Shard
	planRan := pl.Plan
	if ran {
		r.PredictedSeconds, r.BoundSeconds, r.PlanSource, r.PlanSwitchedAt = pl.Expected.Seconds, pl.Bound, pl.Source, switched
		r.CacheBoundSeconds, r.Prediction = pl.CacheBound, pl.account()
		predictNodes(r, pl.Cluster, planRan.Cluster)
	} else if pl.Prof != nil {
		if r.Refined = pl.Learn(e.Observations()); r.Refined > 0 {
			r.Replanned, r.ReplanReason = true, fmt.Sprintf("refined: %d samples measured", r.Refined)
			pl.Invalidate() // the next epoch's plan (next)
		}
		return nil
	}
	return p.annotate(r, e, nil, ran, planRan)
}

// planBeside runs job's stage 1 on what e measures while it runs (the raw
// files it received come on raws; the storage probe goes out at once),
// plans from header estimates and hands e the plan for the positions not
// yet requested. It returns how many positions were requested before (-1:
// no plan, e runs the provisional plan to its end).
func (p *Run) planBeside(ctx context.Context, job *stage1Job, e Epoch, ep stage1.Beside) (int, error) {
	h := p.h
	t0, b0 := h.Now(), e.BytesReceived()
	watch := stage1.WatchLink(ctx, job.srcs, h.Now)
	var probe stage1.StorageProbe
	var probeErr error
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		speed := job.shard[:min(len(job.shard), stage1.QuickSpeedSamples)]
		probe, probeErr = stage1.ProbeStorage(ctx, job.cfg, job.srcs, speed)
	}()
	meter, stopMeter := stage1.StartLinkMeter(h.Now, e.BytesReceived)
	defer stopMeter()
	kept, first, err := stage1.CollectRaws(ctx, ep, BesideCalibration, h.Now, e.BytesReceived)
	// The calibration files go out first, raw, and their storage agent
	// reads them without a budget, so from the first one's arrival to the
	// last one's the link carried what it could, even where the
	// provisional plan's cuts then hold the storage side busy and the link
	// half idle for the rest of the epoch (under half a core the meter's
	// busy spans read 6-9 MB/s of a 12 MB/s link there, and every plan
	// after took the link for that slow).
	calib := stage1.RawPhaseRate(first, len(kept), BesideCalibration, h.Now(), e.BytesReceived())
	est := p.calibrate(kept, job.shard) // while the probe is out
	<-probed
	r := <-est
	if err != nil {
		return -1, err
	}
	if probeErr != nil {
		return -1, probeErr
	}
	if len(kept) == 0 {
		h.Log.Warn().Msg("no raw sample arrived to calibrate the estimate: the first epoch runs its provisional plan")
		return -1, nil
	}
	// The link's rate: the calibration files' while they crossed, or the
	// meter's, over the spans the link was busy, or bytes over time since
	// the first file, whichever is highest.
	linkNow := func() float64 {
		return max(calib, meter.Rate(), stage1.LinkSince(first, t0, b0, h.Now(), e.BytesReceived()))
	}
	link := linkNow()
	st := stage1.RunBeside(job.cfg, job.srcs, p.cat.RawSizes, job.shard, kept, probe, link, t0)
	watch.Finish(ctx, &st, h.Log)
	t1 := h.Now()
	p.measured(st)
	// The calibration files' rate reads a few percent high (the first
	// file's arrival waits on the connection's ramp while the next ones
	// buffer): the first epoch the link binds gives the rate
	// (Planner.driftLink).
	p.pl.linkPeaked = calib > 0 && calib == link
	if err := p.planEstimate(r.prof, r.omitted, r.err, r.at); err != nil {
		return -1, err
	}
	p.summary.Seconds = h.Now().Sub(t0).Seconds()
	// The calibration took a while: the link rate over the longer time
	// since the first file arrived, past the connection's ramp, and the
	// plan again for it (a re-plan takes a millisecond).
	if err := p.faster(linkNow(), 1); err != nil {
		return -1, err
	}
	sw := p.swap(e)
	// Once more a little later, where the link rate measured by then
	// is clearly higher: the epoch's first second underrates a link it
	// does not yet fill.
	select {
	case <-ctx.Done():
	case <-ep.Ended:
	case <-time.After(relinkAfter):
		if old := p.pl.Res.LinkBytesPerSec; p.faster(linkNow(), relinkMargin) == nil && p.pl.Res.LinkBytesPerSec != old {
			p.swap(e)
		}
	}
	p.recalibrate(ctx, job, kept, ep)
	h.Log.Info().Float64("calibration_rate", calib).Float64("meter_rate", meter.Rate()).Float64("meter_peak", meter.Peak()).Msg("link meter beside the first epoch")
	h.Log.Info().Int("raws", len(kept)).Float64("measure_seconds", t1.Sub(t0).Seconds()).Float64("plan_seconds", h.Now().Sub(t1).Seconds()).
		Float64("link_bytes_per_sec", p.pl.Res.LinkBytesPerSec).Int("requested_before", sw).Msg("planned beside the first epoch")
	return sw, nil
}

// estimated is Estimate's result, begun at at.
type estimated struct {
	prof    *profiler.Profile
	omitted Omitted
	err     error
	at      time.Time
}

// calibrate estimates the shard's profile calibrated on raws in the
// background; the result comes on the channel.
func (p *Run) calibrate(raws map[uint64][]byte, shard []uint64) <-chan estimated {
	est := make(chan estimated, 1)
	if len(raws) == 0 {
		est <- estimated{err: errors.New("no calibration sample")}
		return est
	}
	go func() {
		at := p.h.Now()
		prof, omitted, err := Estimate(p.estimateInput(raws, shard))
		est <- estimated{prof, omitted, err, at}
	}()
	return est
}

// recalibrate estimates the shard again, calibrated on the raw files kept
// and up to CalibrationSamples in all with those still coming on
// raws, for the estimate that the epochs' measurements refine from the
// next plan on (p.recal, taken up after the first epoch): the first
// epoch's plan was made on fewer, to start early.
func (p *Run) recalibrate(ctx context.Context, job *stage1Job, kept map[uint64][]byte, ep stage1.Beside) {
	more, _, err := stage1.CollectRaws(ctx, ep, CalibrationSamples-len(kept), p.h.Now, func() int64 { return 0 })
	if err != nil || len(more) == 0 || p.pl.Est == nil {
		return
	}
	select {
	case <-ep.Ended:
		// The epoch ended before the rest came (one failed, or the epoch
		// is short): a calibration now would hold its end back by the
		// calibration's CPU (0.7 s with 16 header bombs among 200
		// samples), so the first estimate stays.
		p.h.Log.Info().Int("raws", len(kept)+len(more)).Msg("estimate not calibrated again: the epoch ended first")
		return
	default:
	}
	maps.Copy(more, kept)
	prof, _, err := Estimate(p.estimateInput(more, job.shard))
	if err != nil {
		p.h.Log.Warn().Err(err).Msg("estimate not calibrated again: the first one stays")
		return
	}
	p.recal = prof
}

// faster re-plans for link, the link rate measured, where it is above
// margin times the planner's.
func (p *Run) faster(link, margin float64) error {
	pl := p.pl
	if pl.Prof == nil || !(link > margin*pl.Res.LinkBytesPerSec) {
		return nil
	}
	pl.Res.LinkBytesPerSec, p.summary.LinkBytesPerSec = link, link
	if err := pl.Replan(); err != nil {
		return planErr(err)
	}
	return nil
}

// swap hands e the planner's plan, if there is one (-1: none).
func (p *Run) swap(e Epoch) int {
	pl := p.pl
	if pl.Prof == nil || pl.Run == nil {
		return -1
	}
	splitOf := p.h.SplitOf(pl.Run)
	k := func(s uint64) int {
		k, err := splitOf(s)
		if err != nil {
			return 0 // checked when planned; raw is always right
		}
		return k
	}
	return e.Swap(pl.Run, k, pl.Res.LinkBytesPerSec, pl.Res.StorageCores)
}
