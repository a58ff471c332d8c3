package computeagent

import (
	"context"
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/compute-agent/planner/stage1"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/internal/cpuquota"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
)

// A policy run (Config.Policy) is planner.Run's: stage 1, stage 2, the
// plans, re-planning and the first epoch's plan made beside it. The agent
// gives it the storage agents, the catalog and its configuration
// (planner.Host) and runs each epoch with the options it returns
// (planner.EpochOpts), handing it the engine's epoch (planner.Epoch).

// Policies are the names Config.Policy accepts.
var Policies = policy.Names

// startPolicy starts the policy run on this agent's storage agents and
// catalog, and returns its epochs' options.
func (a *Agent) startPolicy(ctx context.Context) (func(i int, num uint64) epochOpts, error) {
	cfg := &a.cfg
	// With the connections the first epoch will stripe over (epochConns
	// before any epoch measured the path: the first connection's round
	// trip), so that a long round trip's handshakes happen during stage 1
	// and stage 2, not in the first epoch.
	fs, cat, err := a.storage(ctx, a.epochConns(engine.Opts{}))
	if err != nil {
		return nil, err
	}
	shard := schedule.Order(cfg.Seed, cfg.FirstEpoch, cfg.Rank, cfg.World, cat.Total)
	srcs := make([]stage1.Source, len(fs))
	for i, f := range fs {
		srcs[i] = f
		if cfg.WholeBudget {
			srcs[i] = wholeBudget{f}
		}
	}
	h := &planner.Host{Log: a.log, Now: cfg.Clock.Now, Out: cfg.Out, Policy: cfg.Policy, Threshold: cfg.ReplanThreshold, StrictOffload: cfg.StrictOffload,
		Resplit:     planner.ResplitConfig{Off: cfg.NoResplit, Threshold: cfg.ResplitThreshold, Hold: cfg.ResplitHold},
		ProfilePath: cfg.ProfilePath, ForceProfile: cfg.ForceProfile, NoRefine: cfg.NoRefine,
		Pipeline: cfg.Pipeline, PipelineID: a.pipeID, Seed: cfg.Seed, FirstEpoch: cfg.FirstEpoch,
		Rank: cfg.Rank, World: cfg.World, Limits: cfg.Settings, CacheBytes: a.plannedCacheBytes(), Stage1: a.stage1Config(),
		Catalog: planner.Catalog{Fingerprint: cat.Fingerprint, Total: cat.Total, RawSizes: cat.RawSizes, Header: cat.Header,
			HasHeaders: cat.HasHeaders(), Areas: cat.CutAreas(cfg.Pipeline, cfg.Seed)},
		Sources: srcs, Holds: func(node int, sample uint64) bool { return fs[node].Holds(sample) }, SplitOf: func(p *planner.RunPlan) func(uint64) (int, error) { return a.engine.SplitOf(p) },
		Job: cfg.Job, Shares: func() ([]float64, int) { return a.shares(ctx, fs) }}
	run, err := planner.Start(ctx, h, shard)
	if err != nil {
		return nil, asConfig(err)
	}
	return func(i int, num uint64) epochOpts { return policyOpts(run.Next(i, num)) }, nil
}

// shares asks each storage agent of fs for this job's share of its
// budget now and returns each one's cores to plan for (its last known
// where it did not answer) and the most jobs one of them serves.
func (a *Agent) shares(ctx context.Context, fs []*engine.Fetcher) ([]float64, int) {
	cores := make([]float64, len(fs))
	jobs := 0
	for i, f := range fs {
		if err := f.RefreshShare(ctx, engine.ProbeTimeout); err != nil {
			a.log.Warn().Err(err).Str("storage", f.Name()).Msg("could not ask the storage agent for this job's share: planning for the last known")
		}
		cores[i] = f.CPUs()
		if a.cfg.WholeBudget {
			cores[i] = f.Budget()
		}
		_, n := f.Share()
		jobs = max(jobs, n)
	}
	return cores, jobs
}

// wholeBudget is a storage agent whose whole budget this job plans for
// (Config.WholeBudget).
type wholeBudget struct{ *engine.Fetcher }

func (w wholeBudget) CPUs() float64 { return w.Budget() }

// asConfig marks a plan the policy could not make (planner.ErrPlan), and
// an epoch the configuration does not allow (engine.ErrConfig), as a bad
// configuration (ErrConfig).
func asConfig(err error) error {
	if !errors.Is(err, ErrConfig) && (errors.Is(err, planner.ErrPlan) || errors.Is(err, engine.ErrConfig)) {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return err
}

// policyOpts is the epoch's options as the policy run set them.
func policyOpts(o planner.EpochOpts) epochOpts {
	opts := epochOpts{Opts: engine.Opts{Plan: o.Plan, Rec: o.Rec, Observe: o.Observe, LinkRate: o.LinkRate,
		StorageCores: o.StorageCores, WarmCache: o.WarmCache, KeepRaw: o.KeepRaw, First: o.First}}
	if o.Err != nil {
		opts.err = asConfig(o.Err)
	}
	if o.Annotate != nil {
		opts.Annotate = func(r *report.EpochReport, e *engine.Epoch) error {
			return asConfig(o.Annotate(r, policyEpoch{e}))
		}
	}
	if o.Started != nil {
		opts.Started = func(ctx context.Context, e *engine.Epoch, ended <-chan struct{}) func() {
			return o.Started(ctx, policyEpoch{e}, ended)
		}
	}
	return opts
}

// policyEpoch is the engine's epoch as the policy run sees it.
type policyEpoch struct{ e *engine.Epoch }

var (
	_ planner.Epoch         = policyEpoch{}
	_ planner.LinkDeliverer = policyEpoch{}
)

func (p policyEpoch) BytesReceived() int64                 { return p.e.BytesReceived() }
func (p policyEpoch) Observations() []profiler.Observation { return p.e.Observations() }
func (p policyEpoch) Offloads() *planner.Offloads          { return (*planner.Offloads)(p.e.Offloads()) }
func (p policyEpoch) LinkDelivery() float64                { return p.e.LinkDelivery() }
func (p policyEpoch) Swap(plan *planner.RunPlan, split func(uint64) int, link, cores float64) int {
	return p.e.Swap(plan, split, link, cores)
}

// stage1Config is stage 1's view of the agent's configuration.
func (a *Agent) stage1Config() *stage1.Config {
	cfg := &a.cfg
	return &stage1.Config{
		Log: a.log, Now: cfg.Clock.Now, Pipeline: cfg.Pipeline, PipelineID: a.pipeID, PipelineSpec: a.pipeSpec,
		Seed: cfg.Seed, Epoch: cfg.FirstEpoch, Window: cfg.Window, MaxPayload: cfg.MaxPayload,
		Budget: cfg.ProfileBudget, Workers: cfg.Workers, Cores: a.computeCores(), Force: cfg.ForceProfile, GPURate: a.gpuRate(),
		Limits: cfg.Settings,
	}
}

// computeCores is the compute cores the planner's model gets: the least
// of Workers, the CPUs this process may run on and its cgroup's CPU quota
// (a container's CPU limit, a testbed node's quota), read now.
func (a *Agent) computeCores() float64 {
	c, l, err := cpuquota.Cores(a.cfg.Workers)
	if err != nil {
		a.log.Warn().Err(err).Float64("compute_cores", c).Msg("could not read this process's CPU quota: the model gets --workers cores")
		return c
	}
	a.log.Info().Float64("compute_cores", c).Int("workers", a.cfg.Workers).Str("cpu_limit", l.String()).Msg("compute cores for the model")
	return c
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
