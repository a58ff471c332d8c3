// Package planner is the compute agent's policy planning: the plan as an
// epoch runs it (RunPlan, indexed by sample), and the Planner that turns a
// profile and the resources stage 1 measured (package stage1) into a plan
// and re-plans when an epoch's measurements drift from the plan's
// assumptions, or, for a run without a saved profile, plans from header
// estimates (Estimate) refined with what each epoch observed (Learn); and
// the policy run over the epochs (Run: Start, which runs stage 1, then
// Next for each epoch's options, the first epoch's plan made beside it
// from stage 1's measurements of the epoch's own traffic and swapped in),
// which sees the agent through Host and the engine's epoch through Epoch.
package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/planner/stage1"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
)

// Offloads is what an epoch measured of its samples fetched offloaded
// (split k > 0), for Drift.
type Offloads struct {
	// StorageNS is their storage CPU time (FetchResponse.storage_cpu_ns).
	StorageNS int64
	// StorageEffNS is their budget time times their agent's per-worker
	// share of a core: their CPU time, or more where the agent got less
	// than its budget; 0 from agents that do not report it.
	StorageEffNS int64
	// PlannedNS is the plan's storage CPU estimate (RunPlan.Hint) of the
	// samples served offloaded as planned, at the split this plan lists
	// them at. With PlannedNS > 0, StorageNS and StorageEffNS are of those
	// samples only (a first epoch's requests made under its provisional
	// plan, before the Swap, are not this plan's).
	PlannedNS int64
	// Bytes and PlannedBytes are the stored payload bytes that arrived,
	// and that the plan predicted (RunPlan.Varying), of the samples served
	// as planned at a split whose size varies from epoch to epoch.
	Bytes, PlannedBytes int64
	// TotalEffNS is StorageEffNS of every offload received so far, as
	// planned or not (a re-split within the epoch reads the storage
	// side's load from it).
	TotalEffNS int64
}

// Planner holds a policy run's state between epochs.
type Planner struct {
	Log zerolog.Logger
	// Threshold is the relative drift past which an epoch re-plans
	// (Config.ReplanThreshold).
	Threshold float64
	// ProfilePath is where the profile is saved (Config.ProfilePath;
	// empty: nowhere).
	ProfilePath string
	// Name is the policy (Config.Policy).
	Name string
	// Res is the resources the current plan was made under. The planner
	// leaves its StorageNSPerByte, the transport's CPU per byte, at 0:
	// every storage speed it measures (stage 1's probe, ProbeSpeed, Drift,
	// Learn) is of the offloads' effective time (budget time x share),
	// which already holds what the transport takes of the storage agent's
	// quota, and charging its CPU per byte on top counted it twice: the
	// plans offloaded less than the quota could run (docs/policy.md, "The
	// transport, counted once").
	Res policy.Resources
	// Probe is stage 1's storage probe, which a measured profile prices
	// (ProbeSpeed).
	Probe stage1.StorageProbe
	Prof  *profiler.Profile // this shard's samples; nil until known
	// Saved is the profile as saved at Config.ProfilePath (every shard's
	// samples), whose measured resources each epoch updates; nil when
	// there is none to update.
	Saved *profiler.Profile
	Plan  policy.Plan // valid when Prof is set
	// Shedding: the engine sheds offloads (work-conserving offload, the
	// compute agent's default; Host.StrictOffload turns it off), so
	// Expected predicts Plan as shed (Shed).
	Shedding bool
	// Expected is the epoch the runtime will run under Plan: Plan.Pred,
	// or with Shedding the prediction after the Shedder's rule (Shed);
	// ExpectedShed is how many offloads that moves raw. Valid when Prof
	// is set.
	Expected     policy.Prediction
	ExpectedShed int
	// Bound is the bound for Prof and Res (policy.Bound, on Cluster
	// where there is one); with a cache the bound at the residency the run
	// keeps (policy.Resident).
	Bound float64
	// CacheBound is the bound with the cache that may also move the
	// residency (policy.BoundResult.CacheSeconds); 0 without a cache or
	// on a cluster.
	CacheBound float64
	Run        *RunPlan // Plan as the agent runs it
	// Nodes is the storage agents as stage 1 measured them
	// (stage1.Result.Nodes). With more than one, and a policy of the
	// registry that has a cluster form, Replan plans on the cluster
	// Res.Over(Nodes): which agent serves each sample as well as its
	// split.
	Nodes []policy.StorageNode
	// Holds reports whether Nodes[node] holds sample; nil means every
	// node holds every sample (replicated data).
	Holds func(node int, sample uint64) bool
	// Cluster is the cluster the current plan was made on; nil for a
	// plan on the pooled Res.
	Cluster *policy.Cluster
	// CacheBytes is the compute node's cache budget the policies plan
	// residency under (compute-agent --cache-bytes with the planned cache
	// policy; 0: no cache). Replan puts it into Res.CacheBytes.
	CacheBytes float64
	// resident is the samples the first plan with a cache kept resident:
	// later re-plans keep exactly these (policy.Resident), so the cache's
	// contents never move between epochs.
	resident map[uint64]bool
	// Source is what Prof is (report.PlanEstimate, PlanProfile or
	// PlanMeasured); empty until there is a profile.
	Source string
	// Est is the profile estimated from the catalog's headers (Estimate)
	// when the run plans from it; nil for a saved or recorded profile.
	// Learn refines it into Prof with what the epochs measured.
	Est *profiler.Profile
	// NoRefine makes Learn keep Est as it is (Config.NoRefine).
	NoRefine bool
	// learned is every observation Learn kept, by sample, split and codec.
	learned map[obsKey]profiler.Observation
	// Areas, when set, scales Prof's cuts to the boxes of the epoch the
	// plan is for (Epoch; profiler.CutAreas), so that each epoch's plan
	// and bound count its own cut bytes; Learn turns the observations
	// back into Prof's terms. Nil plans every epoch on the mean boxes.
	Areas *profiler.CutAreas
	// Epoch is the epoch the current plan is for (ForEpoch).
	Epoch uint64
	// stale: the plan is out of date (Invalidate) until the next Replan.
	stale bool
	// expected is Areas.Expect(profiler.ExpectCosts(expectedOf)), kept
	// while Prof is expectedOf.
	expected, expectedOf *profiler.Profile
	// sizeScale calibrates the epoch-varying sizes (profiler.ScaleVarying):
	// what the plans' samples at such splits sent over what the plans
	// predicted, as Drift measured it (0: not yet, 1); sizeSum and sizeN
	// are the sum and count of the epochs' measurements it is the mean of.
	sizeScale, sizeSum float64
	sizeN              int
	// speedFixed: the last epoch's observations refined the profile's
	// costs, so Drift leaves the storage speed alone (its storage CPU
	// check compares with the costs before the refinement).
	speedFixed bool
	// speeds is the last planned epochs' storage CPU the storage speed
	// is measured over (poolSpeed); a new profile's clock (Learn, Adopt)
	// empties it.
	speeds []speedSample
	// computes is the epochs the compute CPU per sample beyond the ops
	// is measured over (driftCompute).
	computes []computeSample
	// linkPeaked says the link's rate came from an epoch's peak
	// (driftLink) or the first epoch's calibration files (Run.planBeside),
	// which read a few percent high: the next link-bound epoch's own rate
	// replaces it.
	linkPeaked bool
}

// obsKey names what an observation measured.
type obsKey struct {
	id         uint64
	split      int
	compressed bool
}

// Learn keeps an epoch's observations (engine.Epoch.Observations) for a
// run that plans from an estimated profile (Est set), their storage CPU
// converted to the profile's clock with the storage speed the epoch's plan
// assumed. The storage CPU is the effective time (StorageEffNS, where the
// agent reported its budget time), which Drift measures the speed
// against: under a quota the thread CPU leaves out the throttling and
// contention every offload pays, and a plan priced on it offloads more
// than the storage side can run. When any measured something not measured
// before (a sample at a split and codec), Prof becomes Est refined with
// all of them (profiler.Refine) and Source PlanMeasured; the caller
// re-plans. It returns how many were new.
func (pl *Planner) Learn(obs []profiler.Observation) int {
	pl.speedFixed = false
	if pl.Est == nil || pl.NoRefine {
		return 0
	}
	if pl.learned == nil {
		pl.learned = map[obsKey]profiler.Observation{}
	}
	speed := pl.Res.StorageSpeed
	if speed <= 0 {
		speed = 1
	}
	added := 0
	for _, o := range pl.Areas.Normalize(obs, pl.Est, pl.Epoch) {
		k := obsKey{o.ID, o.Split, o.Compressed}
		if _, ok := pl.learned[k]; ok {
			continue
		}
		ns := o.StorageNS
		if o.StorageEffNS > 0 {
			ns = o.StorageEffNS
		}
		o.StorageNS = int64(float64(ns) * speed)
		pl.learned[k] = o
		added++
	}
	if added == 0 {
		return 0
	}
	all := make([]profiler.Observation, 0, len(pl.learned))
	for _, o := range pl.learned {
		all = append(all, o)
	}
	slices.SortFunc(all, func(x, y profiler.Observation) int {
		return cmp.Or(cmp.Compare(x.ID, y.ID), cmp.Compare(x.Split, y.Split))
	})
	prof, st := profiler.Refine(pl.Est, all)
	pl.Prof, pl.Source, pl.speedFixed, pl.speeds = prof, report.PlanMeasured, true, nil
	pl.Log.Info().Int("new", added).Int("observed", st.Observed).Float64("cut_ns_ratio", st.CutNS).Float64("cut_bytes_ratio", st.CutBytes).
		Float64("cut_finish_ratio", st.CutFinishNS).Float64("op_ns_ratio", st.OpNS).Msg("estimated profile refined with the epoch's measurements")
	return added
}

// ForEpoch re-plans for epoch's crop boxes, where there is a profile and
// the plan is for another epoch's (Areas set) or out of date
// (Invalidate).
func (pl *Planner) ForEpoch(epoch uint64) error {
	changed := pl.Areas != nil && epoch != pl.Epoch
	pl.Epoch = epoch
	if pl.Prof == nil || !changed && !pl.stale {
		return nil
	}
	return pl.Replan()
}

// Invalidate marks the plan as out of date (an epoch drifted or refined
// the profile): the next ForEpoch re-plans, once, for the epoch it is
// for.
func (pl *Planner) Invalidate() { pl.stale = true }

// profile is Prof with its epoch-varying sizes at their expected values
// and its cuts scaled to Epoch's boxes (Areas: Expect, AtEpoch).
func (pl *Planner) profile() *profiler.Profile {
	return pl.Areas.AtEpoch(pl.meanProfile().ScaleVarying(pl.sizes()), pl.Epoch)
}

// sizes is sizeScale, 1 until Drift measured one.
func (pl *Planner) sizes() float64 {
	if pl.sizeScale > 0 {
		return pl.sizeScale
	}
	return 1
}

// meanProfile is Prof with its costs and epoch-varying sizes at their
// expected values (profiler.ExpectCosts, Areas.Expect), for no epoch's
// boxes in particular: what the residency, which stays for every epoch,
// is chosen on.
func (pl *Planner) meanProfile() *profiler.Profile {
	if pl.Prof == nil {
		return nil
	}
	if pl.expected == nil || pl.expectedOf != pl.Prof {
		pl.expected, pl.expectedOf = profiler.ExpectCosts(pl.Prof), pl.Prof
		if pl.Areas != nil {
			pl.expected = pl.Areas.Expect(pl.expected)
		}
	}
	return pl.expected
}

// Replan plans with the current profile, for Epoch's crop boxes, and the
// current resources.
func (pl *Planner) Replan() error {
	pl.stale = false
	pl.Res.CacheBytes = pl.CacheBytes
	p, r := pl.profile(), pl.Res
	// The compute CPU beyond the ops per sample prices the plan's epoch,
	// not the choice between plans: it is measured on the plan that ran,
	// and how much of it follows a sample's bytes rather than its count
	// one plan's epochs cannot tell (driftCompute). Planned with it, the
	// optimiser traded link bytes for the compute side's ops that the
	// overhead did not follow (docs/policy.md, "The compute side beyond
	// its ops").
	ops := r
	ops.ComputeNSPerSample = 0
	in, c, err := pl.instance(p, ops)
	if err != nil {
		return err
	}
	var cached []bool
	if r.CacheBytes > 0 {
		cached = pl.residentFlags(p, ops)
	}
	plan, b, err := policy.Resident(pl.Name, in, cached)
	if err != nil {
		return err
	}
	if r.ComputeNSPerSample > 0 && r.CacheBytes <= 0 {
		// A plan with a cache is priced on the cache's profile, which
		// Predict does not see: left at its ops.
		if in, _, err = pl.instance(p, r); err != nil {
			return err
		}
		cp, err := policy.Predict(in, plan.Replica, plan.Split, plan.Compress)
		if err != nil {
			return err
		}
		plan.Pred = cp.Totals()
	}
	pl.Bound, pl.CacheBound, pl.Cluster = b.Seconds, b.CacheSeconds, c
	pl.Plan = plan
	pl.Run = NewRunPlan(&plan, p, r).On(pl.Cluster) // its own copy: pl.plan changes at the next re-plan
	pl.Expected, pl.ExpectedShed = plan.Pred, 0
	if pl.Shedding && r.CacheBytes <= 0 {
		// A plan with a cache is priced on the cache's profile
		// (policy.Resident), which Shed does not see: left un-shed.
		if pl.Expected, pl.ExpectedShed, err = Shed(in, &pl.Plan, pl.Run); err != nil {
			return err
		}
	}
	pr := pl.Plan.Pred
	pl.Log.Info().Str("policy", pl.Name).Float64("predicted_seconds", pl.Expected.Seconds).Float64("plan_seconds", pr.Seconds).
		Int("predicted_shed", pl.ExpectedShed).Float64("bound_seconds", pl.Bound).
		Str("bottleneck", pr.Bottleneck).Float64("bytes", pr.Bytes).Float64("storage_cpu_seconds", pr.StorageCPUSeconds).
		Float64("link_bytes_per_sec", r.LinkBytesPerSec).Float64("storage_speed", r.StorageSpeed).Float64("storage_ns_per_byte", r.StorageNSPerByte).
		Int("storage_nodes", max(len(pl.Run.nodes), 1)).Msg("planned")
	return nil
}

// residentFlags is the residency (resident) by p's samples, chosen first
// when no plan has chosen it yet: what the policy keeps resident on the
// mean profile under r, whose CacheBytes is the budget. Nil when the
// policy keeps nothing resident (or cannot plan: the caller's own plan
// then says why).
func (pl *Planner) residentFlags(p *profiler.Profile, r policy.Resources) []bool {
	if pl.resident == nil {
		plan, err := policy.ByName(pl.Name, policy.OneNode(pl.meanProfile(), r))
		if err != nil || plan.Cached == nil {
			return nil
		}
		pl.resident = map[uint64]bool{}
		for i, c := range plan.Cached {
			if c {
				pl.resident[plan.IDs[i]] = true
			}
		}
	}
	cached := make([]bool, len(p.Samples))
	for i, s := range p.Samples {
		cached[i] = pl.resident[s.ID]
	}
	return cached
}

// instance is what Replan plans p on, and its cluster (nil: the one-node
// instance of the pooled r), or, with more than one of Nodes and a policy
// of the registry that has a cluster form, the cluster r.Over(Nodes),
// each sample held by the nodes Holds names (all of them when it names
// none: the fetchers then find whoever holds it), with r's cache. The
// residency (residentFlags) is chosen on the pooled resources either way,
// as for one agent, and policy.Resident keeps it on either instance.
func (pl *Planner) instance(p *profiler.Profile, r policy.Resources) (policy.Instance, *policy.Cluster, error) {
	if e, _ := policy.Lookup(pl.Name); len(pl.Nodes) <= 1 || !e.Cluster {
		return policy.OneNode(p, r), nil, nil
	}
	c := r.Over(pl.Nodes)
	var set []int16
	place, err := policy.NewPlacement(make([]int32, len(p.Samples)), func(i int) []int16 {
		set = set[:0]
		for j := range pl.Nodes {
			if pl.Holds == nil || pl.Holds(j, p.Samples[i].ID) {
				set = append(set, int16(j))
			}
		}
		if len(set) == 0 {
			for j := range pl.Nodes {
				set = append(set, int16(j))
			}
		}
		return set
	})
	if err != nil {
		return policy.Instance{}, nil, err
	}
	in := policy.On(p, c, place)
	in.CacheBytes = r.CacheBytes
	return in, &c, nil
}

// StorageCalibration is the relative error of the plan's storage CPU
// estimate past which the next epoch re-plans, when it is below
// Config.ReplanThreshold. The storage CPU of the offloaded samples is
// measured exactly (each response carries its thread CPU time), while the
// estimate comes from stage 1's few samples and the profile's unfused op
// costs, so a planned epoch calibrates the storage speed ratio rather than
// waiting for a large drift.
const StorageCalibration = 0.05

// SizeCalibration is the relative error of the plan's epoch-varying sizes
// (the cuts, the compressed crops: Offloads.Bytes against PlannedBytes)
// past which a planned epoch calibrates them (Planner.sizeScale): about
// the noise of one epoch's sum over a few hundred samples, below the bias a
// plan's selection keeps (docs/policy.md).
const SizeCalibration = 0.02

// Drift compares an epoch run with plan ran against the plan's
// assumptions, updates the resources where they drifted past the
// threshold, and reports whether it did (the next epoch then runs a new
// plan).
func (pl *Planner) Drift(r *report.EpochReport, m *Offloads, ran policy.Plan) (string, bool) {
	thr := pl.Threshold
	res := pl.Res
	var why []string
	var o Offloads
	if m != nil {
		o = *m
	}
	got := float64(o.StorageEffNS) / 1e9
	if got <= 0 { // an agent that does not report budget time
		got = float64(o.StorageNS) / 1e9
	}
	pred := ran.Pred.StorageCPUSeconds
	if planned := float64(o.PlannedNS) / 1e9; planned > 0 {
		// Only what the storage agents ran as planned: offloads answered
		// raw (work-conserving offload) cost them next to nothing.
		pred = planned
	}
	pl.logStorage(r.Epoch, pred, got, o.StorageNS, res.StorageSpeed)
	if pred > 0 && got > 0 && !pl.speedFixed {
		speed := res.StorageSpeed
		if speed <= 0 {
			speed = 1
		}
		pooled, n := pl.poolSpeed(speed*pred, got, thr)
		if d := pooled / speed; d > 1+min(thr, StorageCalibration) || d < 1-min(thr, StorageCalibration) {
			res.StorageSpeed = pooled
			w := fmt.Sprintf("storage cpu %.3fs, planned %.3fs", got, pred)
			if n > 1 {
				w += fmt.Sprintf(" (speed %.3f over %d epochs)", pooled, n)
			}
			why = append(why, w)
		}
		pl.Observe(profiler.MeasuredResources{StorageSpeed: speed * pred / got})
	}
	if w := pl.calibrateSizes(o); w != "" {
		why = append(why, w)
	}
	if w := pl.driftCompute(r, ran, &res); w != "" {
		why = append(why, w)
	}
	if w := pl.driftLink(r, m, ran, &res); w != "" {
		why = append(why, w)
	}
	// What sending costs the storage side (r.StorageNSPerByte) is not
	// planned on: see Planner.Res.
	if len(why) == 0 {
		return "", false
	}
	reason := "drift: " + strings.Join(why, "; ")
	pl.Log.Info().Uint64("epoch", r.Epoch).Str("drift", reason).Msg("rates drifted: re-planning")
	pl.Res = res
	return reason, true
}

// SpeedWindow is how many planned epochs' storage CPU the storage speed is
// measured over (poolSpeed). One epoch's measurement moves by 10-15%
// from epoch to epoch on a shared machine, and with the plan: a plan that
// offloads more loads the storage agent's quota more, and its offloads
// cost more effective time each. Taking each epoch's measurement as the
// speed made the plans see-saw between two speeds and a run's last epoch
// land on either (docs/policy.md, "The storage speed over epochs").
const SpeedWindow = 4

// speedSample is one planned epoch's storage CPU of its offloads: as the
// plan priced it on the profile's clock (planned seconds times the speed
// the plan assumed) and as measured (effective seconds).
type speedSample struct{ profile, got float64 }

// poolSpeed adds an epoch's storage CPU of its offloads (profile: planned
// seconds on the profile's clock; got: measured) to the storage speed's
// window and returns the speed over the window, the ratio of its sums,
// and how many epochs that is. An epoch whose own speed is more than thr
// from the window's is a change (a neighbour on the storage node, a new
// quota), not noise: the window restarts from it.
func (pl *Planner) poolSpeed(profile, got, thr float64) (float64, int) {
	window := func() float64 {
		var p, g float64
		for _, s := range pl.speeds {
			p, g = p+s.profile, g+s.got
		}
		return p / g
	}
	if len(pl.speeds) > 0 {
		if d := (profile / got) / window(); d > 1+thr || d < 1-thr {
			pl.speeds = pl.speeds[:0]
		}
	}
	pl.speeds = append(pl.speeds, speedSample{profile, got})
	if n := len(pl.speeds); n > SpeedWindow {
		pl.speeds = slices.Delete(pl.speeds, 0, n-SpeedWindow)
	}
	return window(), len(pl.speeds)
}

// ComputeWindow is how many epochs the compute side's CPU beyond its ops
// is measured over (driftCompute), as SpeedWindow is for the storage
// speed.
const ComputeWindow = 4

// computeSample is one epoch's compute agent CPU beyond its finishing
// workers' (process less finishing CPU, seconds) and the samples it
// delivered.
type computeSample struct{ beyond, samples float64 }

// driftCompute is Drift's compute CPU per sample beyond the ops
// (Resources.ComputeNSPerSample). The profile prices the finishing ops
// alone, but the compute node's cores also run what no op's clock sees:
// receiving (gRPC, TLS, copies), the engine, the hand-off and the garbage
// the decodes leave. On 500 px photographs under a 1-core compute quota
// that was 0.8-1.3 ms a sample, 0.6-0.7 of the ops' CPU again
// (2026-11-30): the compute side bound the epoch while the plan, pricing
// the ops alone, predicted the link, and the link's drift then read the
// compute side's pace as a slower link. So each epoch's process CPU less
// its finishing CPU, over the samples it delivered, pooled as a ratio of
// sums over the last ComputeWindow epochs (a window that restarts when an
// epoch's own figure moves past the threshold), is the term the plans'
// epochs are priced with (Replan: it prices the plan, it does not choose
// it; part of it follows the bytes a plan sends, which one plan's epochs
// cannot tell apart from the count). It re-plans when the change moves
// the plan's compute time by more than StorageCalibration of its epoch.
// Profiled epochs (stage 2's timing) and a first epoch that ran beside
// stage 1 do not count. It returns the reason, or "".
func (pl *Planner) driftCompute(r *report.EpochReport, ran policy.Plan, res *policy.Resources) string {
	if r.Profiled || (r.Stage1 != nil && r.Stage1.Overlapped) || r.Samples <= 0 ||
		r.ComputeCPUSeconds <= 0 || r.ProcessCPUSeconds < r.ComputeCPUSeconds {
		return ""
	}
	perSample := func() float64 {
		var b, n float64
		for _, c := range pl.computes {
			b, n = b+c.beyond, n+c.samples
		}
		return b / n * 1e9
	}
	c := computeSample{r.ProcessCPUSeconds - r.ComputeCPUSeconds, float64(r.Samples)}
	if len(pl.computes) > 0 {
		if d := c.beyond / c.samples * 1e9 / perSample(); d > 1+pl.Threshold || d < 1-pl.Threshold {
			pl.computes = pl.computes[:0]
		}
	}
	pl.computes = append(pl.computes, c)
	if n := len(pl.computes); n > ComputeWindow {
		pl.computes = slices.Delete(pl.computes, 0, n-ComputeWindow)
	}
	ns := perSample()
	old := res.ComputeNSPerSample
	res.ComputeNSPerSample = ns
	// How far the change moves the plan's compute time, against its epoch.
	moved := math.Abs(ns-old) * c.samples / 1e9
	if res.ComputeCores > 0 {
		moved /= res.ComputeCores
	}
	if epoch := ran.Pred.Seconds; epoch > 0 && moved <= StorageCalibration*epoch {
		res.ComputeNSPerSample = old // within the noise: keep the plan's
		return ""
	}
	return fmt.Sprintf("compute cpu beyond the ops %.3fs for %d samples: %.0f us a sample over %d epochs (planned %.0f)",
		c.beyond, r.Samples, ns/1e3, len(pl.computes), old/1e3)
}

// driftLink is Drift's link rate: the epoch's bytes over its seconds
// against the planned rate in res, which it updates; the reason to
// re-plan, or "".
func (pl *Planner) driftLink(r *report.EpochReport, m *Offloads, ran policy.Plan, res *policy.Resources) string {
	thr := pl.Threshold
	if r.Seconds <= 0 || r.BytesReceived <= 0 || res.LinkBytesPerSec <= 0 {
		return ""
	}
	got := float64(r.BytesReceived) / r.Seconds
	if ran.Pred.Bottleneck == policy.Link {
		pl.Observe(profiler.MeasuredResources{LinkBytesPerSec: got})
	}
	ratio := got / res.LinkBytesPerSec
	// A lower rate is the link's only when the link bound the epoch:
	// otherwise bytes over seconds measures whatever did (a storage
	// agent starved of CPU), and taking it for the link's capacity
	// makes the next plan offload more, which makes that worse. The
	// plan predicted the link to bound it, and the storage side was
	// not busy for most of the epoch.
	storageBusy := 0.0
	if cores := pl.Res.StorageCores; cores > 0 && m != nil {
		storageBusy = float64(m.StorageEffNS) / 1e9 / cores / r.Seconds
	}
	// The busiest second of an epoch whose storage side was busy
	// throughout carried about peak: a link that such an epoch never
	// filled is still as fast as that (a plan made for a slower one
	// offloads more than the link needs, which keeps the storage side
	// the bound). Only then: the peak reads a few percent high
	// (stage1.LinkMeter.Peak), and a third high where the receiver fell
	// behind and caught up from its buffers (a No-Off epoch bound by its
	// own decoding read 16 MB/s on a 12 MB/s link); the next epoch the
	// link binds, with the storage side not busy, gives the rate.
	peak := r.LinkPeakBytesPerSec
	// A first epoch that ran the provisional plan before this one took
	// over (stage 1 beside it) is not this plan's: its bytes over seconds
	// may raise the rate but not lower it.
	overlapped := r.Stage1 != nil && r.Stage1.Overlapped
	// Likewise a compute side busy for most of the epoch (its process
	// CPU over the configured cores: driftCompute) set its pace.
	computeBusy := 0.0
	if cores := pl.Res.ComputeCores; cores > 0 {
		computeBusy = r.ProcessCPUSeconds / cores / r.Seconds
	}
	linkBound := ran.Pred.Bottleneck == policy.Link && storageBusy < 0.8 && computeBusy < 0.8 && !overlapped
	switch {
	case storageBusy >= 0.8 && peak > got && peak > (1+thr)*res.LinkBytesPerSec:
		w := fmt.Sprintf("link peak %.0f B/s, planned %.0f B/s", peak, res.LinkBytesPerSec)
		res.LinkBytesPerSec, pl.linkPeaked = peak, true
		return w
	case ratio > 1+thr || (ratio < 1-thr && linkBound):
		w := fmt.Sprintf("link %.0f B/s, planned %.0f B/s", got, res.LinkBytesPerSec)
		res.LinkBytesPerSec, pl.linkPeaked = got, false
		return w
	case pl.linkPeaked && linkBound && ratio < 1:
		res.LinkBytesPerSec, pl.Res.LinkBytesPerSec, pl.linkPeaked = got, got, false
		return ""
	case pl.linkPeaked && !overlapped && peak < res.LinkBytesPerSec && peak >= peakOvershoot*res.LinkBytesPerSec:
		// A rate that read a few percent high, which a metered epoch's
		// busiest second did not reach: the link carried at most about
		// that (further under it, the epoch did not fill the link, and
		// says nothing of it).
		v := max(got, peak)
		res.LinkBytesPerSec, pl.Res.LinkBytesPerSec, pl.linkPeaked = v, v, false
		return ""
	case ratio > 1:
		// A link carried at least that: a faster rate within the
		// threshold is taken without a re-plan (stage 1's short probe
		// reads low, and a run without a saved profile kept it), and
		// the next plan made is made with it.
		res.LinkBytesPerSec, pl.Res.LinkBytesPerSec = got, got
	}
	return ""
}

// peakOvershoot is how far under a link rate that read high (a peak, the
// first epoch's calibration files: 6-12% over the link in the testbed)
// an epoch's busiest second may be and still correct it (driftLink).
const peakOvershoot = 0.85

// logStorage logs an epoch's storage CPU of its offloads: planned (at the
// storage speed speed), effective and thread CPU (Offloads), in seconds;
// nothing when either of the first two is unknown.
func (pl *Planner) logStorage(epoch uint64, planned, effective float64, threadNS int64, speed float64) {
	if planned > 0 && effective > 0 {
		pl.Log.Info().Uint64("epoch", epoch).Float64("planned_s", planned).Float64("effective_s", effective).
			Float64("thread_s", float64(threadNS)/1e9).Float64("speed", speed).
			Msg("storage cpu of the offloads: planned and measured")
	}
}

// Guard is the measured Guard: a planned epoch slower than the last
// measured No-Off epoch (noOff seconds; 0 when none was measured) means
// the plan's model is wrong about something that matters, whatever the
// drift thresholds say, so the next epoch re-plans with the resources as
// this epoch updated them. It returns the reason, or "".
func (pl *Planner) Guard(r *report.EpochReport, noOff float64) string {
	if noOff <= 0 || pl.Name == policy.NameNoOff || r.Seconds <= noOff {
		return ""
	}
	reason := fmt.Sprintf("guard: epoch took %.3f s, slower than No-Off's last measured %.3f s", r.Seconds, noOff)
	pl.Log.Warn().Uint64("epoch", r.Epoch).Float64("seconds", r.Seconds).Float64("nooff_seconds", noOff).Msg("planned epoch slower than No-Off: re-planning")
	return reason
}

// calibrateSizes takes up what the epoch's samples of varying size sent
// against the plan (o.Bytes, o.PlannedBytes) into sizeScale, and says why
// when that moved it past SizeCalibration (else ""). The selection a
// plan makes on estimated sizes keeps a bias that profiler.Expect leaves
// (a few percent). Each epoch's ratio, times the scale its plan had,
// measures it; the scale is their mean over the planned epochs, as one
// epoch's sum is a few percent noisy.
func (pl *Planner) calibrateSizes(o Offloads) string {
	if o.PlannedBytes <= 0 || o.Bytes <= 0 {
		return ""
	}
	ratio := float64(o.Bytes) / float64(o.PlannedBytes)
	pl.sizeSum, pl.sizeN = pl.sizeSum+ratio*pl.sizes(), pl.sizeN+1
	next := min(max(pl.sizeSum/float64(pl.sizeN), 0.5), 2)
	why := ""
	if d := next / pl.sizes(); d > 1+SizeCalibration || d < 1-SizeCalibration {
		why = fmt.Sprintf("varying sizes %.3f of planned", ratio)
	}
	pl.sizeScale = next
	return why
}

// Observe folds one epoch's measurement into the saved profile's running
// means (an epoch's weight is 1 per field it measured). The link is the
// exception: a link carries at most its capacity, and an epoch that moved
// fewer bytes per second was bound by something else (the profiling epoch
// by stage 2's recording), so the saved link rate is the highest measured.
func (pl *Planner) Observe(obs profiler.MeasuredResources) {
	if pl.Saved == nil {
		return
	}
	if pl.Saved.Resources == nil {
		pl.Saved.Resources = &profiler.MeasuredResources{}
	}
	m := pl.Saved.Resources
	if link := obs.LinkBytesPerSec; link > 0 {
		m.LinkBytesPerSec = max(m.LinkBytesPerSec, link)
		obs.LinkBytesPerSec = 0
	}
	m.Update(obs, 1)
}

// Save writes the profile with its updated means to Config.ProfilePath.
func (pl *Planner) Save() {
	path := pl.ProfilePath
	if pl.Saved == nil || path == "" {
		return
	}
	if err := profiler.Save(path, pl.Saved); err != nil {
		pl.Log.Warn().Err(err).Str("path", path).Msg("profile not saved")
	}
}

// Adopt turns stage 2's records into the run's profile, saves it and
// plans. A shard with no sample recorded keeps running No-Off. r is the
// profiling epoch's report: a No-Off epoch bound by the link (stage 1 said
// so), whose bytes over seconds is the link rate measured over a whole
// epoch.
func (pl *Planner) Adopt(rec *profiler.Recorder, shard int, r *report.EpochReport) error {
	prof := rec.Profile()
	pl.ProbeSpeed(prof) // before the speed goes into the profile's resources
	pl.Log.Info().Int("recorded", len(prof.Samples)).Int("missing", shard-len(prof.Samples)).Msg("stage 2: profile recorded")
	if len(prof.Samples) == 0 {
		pl.Log.Warn().Msg("stage 2: no sample recorded; staying with No-Off")
		return nil
	}
	// The profiling epoch's bytes over seconds is a lower bound on the
	// link (stage 2's recording may have bound it); stage 1's probe is
	// another.
	obs := profiler.MeasuredResources{StorageSpeed: pl.Res.StorageSpeed, NoOffSeconds: r.Seconds, LinkBytesPerSec: pl.Res.LinkBytesPerSec}
	if r.Seconds > 0 && r.BytesReceived > 0 {
		obs.LinkBytesPerSec = max(obs.LinkBytesPerSec, float64(r.BytesReceived)/r.Seconds)
	}
	prof.Resources = &profiler.MeasuredResources{}
	prof.Resources.Update(obs, 1)
	pl.Res = pl.Res.WithMeasured(prof.Resources)
	if path := pl.ProfilePath; path != "" {
		pl.Saved = prof
		if err := profiler.Save(path, prof); err != nil {
			pl.Log.Warn().Err(err).Str("path", path).Msg("stage 2: profile not saved")
		} else {
			pl.Log.Info().Str("path", path).Msg("stage 2: profile saved")
		}
	}
	pl.Prof, pl.Source, pl.speeds = prof, report.PlanProfile, nil
	return pl.Replan()
}

// RunPlan is a plan (a *policy.Plan) indexed for running: by sample id,
// its split and codec and, for a policy's plan, the planner's hints for
// work-conserving admission (FetchRequest.priority, cost_ns) and pacing.
type RunPlan struct {
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
	// varying, per entry, is the payload the plan predicts where the
	// sample's split has a size that varies from epoch to epoch (a cut, or
	// a compressed split from the crop on; profiler.Expect), else 0.
	varying []uint32
	// Speed is the planner's storage Speed (1 without a profile).
	Speed float64
	// NSPerByte is the planner's StorageNSPerByte (0 without a profile).
	NSPerByte float64
	// nodes names the storage agents a cluster plan's Replica indexes;
	// nil for a plan on pooled resources.
	nodes []string
}

// NewRunPlan indexes pl, a checked plan. With a profile p (the one pl was
// made from: entry i is p.Samples[i]) and the resources r it was made
// under, it also computes each offload's hints; pl's codecs then decide
// every request's (see RunPlan.Codec).
func NewRunPlan(pl *policy.Plan, p *profiler.Profile, r policy.Resources) *RunPlan {
	out := &RunPlan{plan: pl, Speed: 1}
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
		out.Speed = r.StorageSpeed
	}
	out.NSPerByte = max(r.StorageNSPerByte, 0)
	n := len(pl.Split)
	out.prio, out.cost, out.varying = make([]uint32, n), make([]uint64, n), make([]uint32, n)
	for i := range min(n, len(p.Samples)) {
		s := &p.Samples[i]
		zstd := pl.Compress != nil && pl.Compress[i]
		k := pl.Split[i]
		if bytes, _, ok := offloadCost(s, k, zstd); ok && (k == policy.SplitCut || zstd && p.CropSplit > 0 && k >= p.CropSplit) {
			out.varying[i] = uint32(min(bytes, math.MaxUint32))
		}
		if bytes, ns, ok := offloadCost(s, k, zstd); ok && ns > 0 {
			out.cost[i] = uint64(ns)
			if saved := float64(s.Raw) - bytes; saved > 0 {
				out.prio[i] = uint32(min(saved/(ns/1e6), math.MaxUint32))
			}
		}
	}
	return out
}

// On names the storage agents of c, the cluster a cluster plan was made
// on, for Replica; a nil c leaves p a plan on pooled resources. It
// returns p.
func (p *RunPlan) On(c *policy.Cluster) *RunPlan {
	p.nodes = nil
	if c != nil {
		for _, n := range c.Storage {
			p.nodes = append(p.nodes, n.Name)
		}
	}
	return p
}

// Name is the plan's Name in reports.
func (p *RunPlan) Name() string { return p.plan.Policy }

// StorageSpeed is p.Speed, the planner's storage speed the hints' ns are
// divided by (the engine's Plan).
func (p *RunPlan) StorageSpeed() float64 { return p.Speed }

// StorageNSPerByte is the planner's storage CPU ns per payload byte sent
// (policy.Resources.StorageNSPerByte), which the shedder prices as the
// model does.
func (p *RunPlan) StorageNSPerByte() float64 { return p.NSPerByte }

// Entry is the index of sample's entry in the plan, if it has one.
func (p *RunPlan) Entry(sample uint64) (int, bool) {
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

// Split is sample's Split, checked against p and n ops.
func (p *RunPlan) Split(sample uint64, pipe *ops.Pipeline, n int) (int, error) {
	k := p.plan.Default
	if i, ok := p.Entry(sample); ok {
		k = p.plan.Split[i]
	}
	if err := ValidSplit(pipe, k, n); err != nil {
		return 0, fmt.Errorf("plan %s: sample %d: %v", p.Name(), sample, err)
	}
	return k, nil
}

// Hint is the sample's priority (bytes saved per storage CPU-ms) and
// storage CPU estimate (ns on the profile's clock); zeros for raw and for
// a plan without a profile.
func (p *RunPlan) Hint(sample uint64) (uint32, uint64) {
	if i, ok := p.Entry(sample); ok {
		return p.HintAt(i)
	}
	return 0, 0
}

// HintAt is Hint of the plan's entry i (RunPlan.At).
func (p *RunPlan) HintAt(i int) (uint32, uint64) {
	if p.prio == nil {
		return 0, 0
	}
	return p.prio[i], p.cost[i]
}

// Replica is the storage agent the plan chose to serve sample, by name;
// ok is false when the plan chose none (a plan on pooled resources, a
// plan file, a sample it does not list) and for a nil p.
func (p *RunPlan) Replica(sample uint64) (name string, ok bool) {
	if p == nil || p.nodes == nil || p.plan.Replica == nil {
		return "", false
	}
	i, ok := p.Entry(sample)
	if !ok || i >= len(p.plan.Replica) {
		return "", false
	}
	j := int(p.plan.Replica[i])
	if j < 0 || j >= len(p.nodes) {
		return "", false
	}
	return p.nodes[j], true
}

// Cached reports whether the plan keeps sample resident in the compute
// node's cache (policy.Plan.Cached); false for a nil p, a plan without
// residency and a sample it does not list.
func (p *RunPlan) Cached(sample uint64) bool {
	if p == nil || p.plan.Cached == nil {
		return false
	}
	i, ok := p.Entry(sample)
	return ok && i < len(p.plan.Cached) && p.plan.Cached[i]
}

// Caches reports whether the plan keeps any sample resident.
func (p *RunPlan) Caches() bool { return p != nil && slices.Contains(p.plan.Cached, true) }

// Hinted reports whether the plan carries the planner's hints (it was
// made from a profile).
func (p *RunPlan) Hinted() bool { return p.prio != nil }

// VaryingAt is the payload the plan predicts for its entry i where that
// sample's split has a size that varies from epoch to epoch (see
// RunPlan.varying); ok is false elsewhere.
func (p *RunPlan) VaryingAt(i int) (bytes int64, ok bool) {
	if p.varying == nil || p.varying[i] == 0 {
		return 0, false
	}
	return int64(p.varying[i]), true
}

// At is sample's entry where the plan lists it at split k (a request made
// under an earlier plan, before a Swap, is not this plan's).
func (p *RunPlan) At(sample uint64, k int) (int, bool) {
	i, ok := p.Entry(sample)
	return i, ok && p.plan.Split[i] == k
}

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

// Codec is the codec requested for sample: a policy's plan decides it
// (zstd where the plan compresses the sample, else none); for other plans
// it is def (Config.Codec).
func (p *RunPlan) Codec(sample uint64, def wireform.Codec) wireform.Codec {
	if !p.Hinted() {
		return def
	}
	if i, ok := p.Entry(sample); ok && p.plan.Compress != nil && p.plan.Compress[i] {
		return wireform.CodecZstd
	}
	return wireform.CodecNone
}

// ValidSplit checks k: in [0, n], or ops.SplitCut where p has it.
func ValidSplit(p *ops.Pipeline, k, n int) error {
	if k == ops.SplitCut {
		if !p.CanCut() {
			return fmt.Errorf("split %d (the JPEG-domain crop) needs a pipeline that starts with decode, random_resized_crop; %s does not", k, p.ID())
		}
		return nil
	}
	if k < 0 || k > n {
		return fmt.Errorf("split %d outside [0, %d]", k, n)
	}
	return nil
}

// ProbeSpeed takes the storage speed from stage 1's probe priced against
// prof, a measured profile's op costs (stage1.StorageProbe.SpeedAgainst),
// instead of against the same work timed here, and reports whether it
// did (the probe compared at least two samples) with the speed's relative
// standard error. The profile's op costs
// were recorded in a busy epoch, slower than stage 1's quiet timing, and
// the probe's thread CPU is less than the quota an epoch spends (the
// transport shares it): priced on its own clock, each offload costs what
// an epoch spends of the storage agent's quota. The probe's samples are
// priced at their expected costs (profiler.ExpectCosts), the costs every
// plan prices its offloads at: a probe of a few dozen samples against
// their one recorded timing each carries that timing's noise (15-21% a
// sample on generated sets) into the speed, and the plans then price
// with costs the speed was not measured against.
func (pl *Planner) ProbeSpeed(prof *profiler.Profile) (rse float64, ok bool) {
	if prof == nil {
		return 0, false
	}
	prof = profiler.ExpectCosts(prof)
	at := make(map[uint64]int, len(prof.Samples))
	for i, s := range prof.Samples {
		at[s.ID] = i
	}
	speed, rse, n := pl.Probe.SpeedAgainst(func(id uint64, k int) (float64, bool) {
		i, ok := at[id]
		if !ok || k <= 0 || k > len(prof.Samples[i].OpNS) {
			return 0, false
		}
		var ns int64
		for _, c := range prof.Samples[i].OpNS[:k] {
			ns += c
		}
		return float64(ns), true
	})
	if n < 2 || !(speed > 0) {
		return 0, false
	}
	pl.Log.Info().Float64("speed", speed).Float64("speed_rse", rse).Int("samples", n).Float64("stage1_speed", pl.Res.StorageSpeed).
		Msg("storage speed: stage 1's probe priced against the profile's op costs")
	pl.Res.StorageSpeed = speed
	return rse, true
}
