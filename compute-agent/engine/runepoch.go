package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/journal"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/trainer"
)

// Input is one epoch as the agent hands it to the engine: its number, the
// storage agents found for it and their catalog (or why none was found),
// the trainer ranks that asked for it, and its options.
type Input struct {
	Num uint64
	// Began is when the agent began the epoch, before it looked for the
	// storage agents: the report's start wait counts from it, or from when
	// the trainer ranks asked (Trainer.Asked) where that is earlier.
	Began   time.Time
	Storage []*Fetcher
	Catalog *catalog.Catalog
	// Err, when set, is why no storage agent could serve the epoch: Run
	// only reports the failure.
	Err error
	// Trainer, when set, is the epoch the local trainer ranks asked for:
	// the epoch runs their orders and fills their slots, which Hub serves.
	Trainer *trainer.EpochReq
	Hub     *trainer.Hub
	Opts
}

// Run runs epoch in.Num from its shard to its report. It opens the
// journal and the node's cache on first use (Config.Journal, Cache), decides the
// shard (the rank's order or the trainer ranks', less what the journal
// says was delivered, each sample at its split under in.Plan), builds the
// trainer ranks' assembler, prepares and runs the epoch, completes its
// report (in.Annotate), appends it to Config.ReportPath and records the
// epoch done in the journal. A failed or interrupted epoch's report is
// written too, with its status and error. It returns ErrSkipped, and runs
// nothing, for an epoch the state dir says completed before a restart.
func Run(ctx context.Context, cfg *Config, in Input) (report.EpochReport, error) {
	began := in.Began
	if t := in.Trainer; t != nil && t.Asked > 0 && t.Asked < began.UnixNano() {
		began = time.Unix(0, t.Asked) // the ranks asked while the agent was busy (stage 1)
	}
	r, err := report.EpochReport{}, in.Err
	if err == nil {
		r, err = runOnce(ctx, cfg, began, in)
	}
	if err == nil || errors.Is(err, ErrSkipped) {
		return r, err
	}
	r.Epoch, r.Status, r.Error = in.Num, "failed", err.Error()
	if r.StartUnixNS == 0 { // failed before its first request: all of it was waiting
		r.StartWaitSeconds = cfg.Now().Sub(began).Seconds()
	}
	if ctx.Err() != nil {
		r.Status = "interrupted"
	}
	if r.Pipeline == "" {
		r.Pipeline, r.Plan = cfg.PipelineID, in.Plan.Name()
	}
	if r.Failed == nil {
		r.Failed = []report.SampleFailure{}
	}
	cfg.Log.Error().Err(err).Uint64("epoch", in.Num).Str("status", r.Status).Msg("epoch failed")
	if cfg.ReportPath != "" {
		if werr := report.Append(cfg.ReportPath, r); werr != nil {
			err = errors.Join(err, fmt.Errorf("engine: report: %w", werr))
		}
	}
	return r, err
}

// runOnce runs one epoch in named steps: open the journal and the cache, decide the
// shard, prepare the epoch's run, run it, and finish its report.
func runOnce(ctx context.Context, cfg *Config, began time.Time, in Input) (report.EpochReport, error) {
	jr, err := cfg.Journal.Open(in.Catalog.Fingerprint, in.Plan.Name())
	if err != nil {
		return report.EpochReport{}, fmt.Errorf("engine: samples out: %w", err)
	}
	c, err := cfg.Cache.Open()
	if err != nil && !errors.Is(err, cache.ErrClosed) {
		return report.EpochReport{}, fmt.Errorf("%w: %w", ErrConfig, err)
	} else if err != nil {
		return report.EpochReport{}, err
	} else if c != nil {
		defer c.Flush() // the index; entries are written as they come
	}
	if jr.Complete(in.Num) {
		cfg.Log.Info().Uint64("epoch", in.Num).Msg("epoch completed before the restart: skipped")
		return report.EpochReport{}, ErrSkipped
	}
	sh, tr, err := cfg.shard(in, jr)
	if err != nil {
		return report.EpochReport{}, err
	}
	e := NewEpoch(cfg, in.Num, in.Catalog, sh, in.Opts)
	e.cache = c
	if tr != nil {
		asm := cfg.assembler(e, tr, len(sh.Order), in.Trainer)
		e.feed(asm, tr)
		if err := in.Hub.Start(asm); err != nil {
			return report.EpochReport{}, err
		}
		defer in.Hub.Finish()
	}
	if err := e.prepare(in.Storage, jr); err != nil {
		return report.EpochReport{}, err
	}
	wait, ended := func() {}, make(chan struct{})
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if in.Started != nil {
		wait = in.Started(sctx, e, ended)
	}
	r, err := e.measured(ctx, in.Storage)
	if err != nil {
		cancel()
	}
	close(ended)
	wait()
	if r.StartUnixNS != 0 {
		r.StartWaitSeconds = max(0, time.Unix(0, r.StartUnixNS).Sub(began).Seconds())
		if r.FirstBatchSeconds > 0 {
			r.FirstBatchSeconds += r.StartWaitSeconds
		}
	}
	if err != nil {
		return r, err
	}
	return e.done(r, jr, in.Annotate)
}

// shard decides the epoch's positions (the rank's order, or the local
// trainer ranks' positions tr), less what the journal says was delivered,
// and each position's split under in.Plan.
func (cfg *Config) shard(in Input, jr *journal.Journal) (sh Shard, tr *trainer.Positions, _ error) {
	num, total := in.Num, in.Catalog.Total
	if in.Trainer != nil {
		var err error
		if tr, err = in.Trainer.Positions(cfg.Seed, total, cfg.Batch, cfg.DropLast, cfg.StrictOrder); err != nil {
			return sh, nil, err
		}
		sh.Order = tr.Order
	} else {
		// Every rank the same count (DDP hangs on uneven ones): padded by
		// repeats of its own samples, or with --drop-last cut to full
		// batches; with one rank, the whole catalog.
		sh.Order = schedule.RankOrder(cfg.Seed, num, cfg.Rank, cfg.World, total, cfg.Batch, cfg.DropLast)
	}
	sh.Padded = max(0, len(sh.Order)-len(schedule.Order(cfg.Seed, num, cfg.Rank, cfg.World, total)))
	if done := jr.Delivered(num); len(done) > 0 {
		// Resume: the samples journaled before the restart were delivered;
		// the rest keep their order.
		sh.Order = slices.DeleteFunc(slices.Clone(sh.Order), func(s uint64) bool { _, ok := done[s]; return ok })
		sh.Resumed = len(done)
		cfg.Log.Info().Uint64("epoch", num).Int("resumed", sh.Resumed).Int("left", len(sh.Order)).Msg("resuming the epoch")
	}
	sh.Split = make([]int, len(sh.Order))
	splitOf := cfg.SplitOf(in.Plan)
	for i, s := range sh.Order {
		k, err := splitOf(s)
		if err != nil {
			return sh, nil, err
		}
		sh.Split[i] = k
	}
	return sh, tr, nil
}

// SplitOf is each sample's split under plan as the agent runs it: a plan
// names splits of the whole pipeline; where the trainer runs its tail
// (TailOps), a split past the agent's part is cut back to its end.
func (cfg *Config) SplitOf(plan Plan) func(sample uint64) (int, error) {
	p := cfg.Pipeline
	n := p.Len() + cfg.TailOps
	return func(s uint64) (int, error) {
		k, err := plan.Split(s, p, n)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return min(k, p.Len()), nil
	}
}

// assembler is the assembler that fills the slots of the ranks req names
// with epoch e's positions tr (of positions in all). Under --on-error skip
// it keeps each rank's first rows to repeat where failed samples leave
// rows free at the end of its epoch, so every batch has its full rows
// (docs/training.md).
func (cfg *Config) assembler(e *Epoch, tr *trainer.Positions, positions int, req *trainer.EpochReq) *trainer.Assembler {
	return trainer.NewAssembler(e, cfg.Trainer, req.Conns, trainer.Layout{
		Strict: cfg.StrictOrder, Batch: cfg.Batch, Queue: cfg.Queue,
		Rows: tr.Rows, Batches: tr.Batches, First: tr.First, Positions: positions,
		Repeat: !cfg.FailOnError,
	})
}

// measured runs the prepared epoch over fs, sampling the GPU meanwhile,
// and returns its account so far; err is the run's.
func (e *Epoch) measured(ctx context.Context, fs []*Fetcher) (report.EpochReport, error) {
	gctx, stopGPU := context.WithCancel(ctx)
	var gpu report.GPUStats
	var wg sync.WaitGroup
	if g := e.cfg.GPU; g != nil {
		wg.Go(func() { gpu = g.Sample(gctx) })
	}
	if m := e.cfg.Metrics; m != nil {
		m.Running(e)
		defer m.Running(nil)
	}
	err := e.execute(ctx, fs)
	stopGPU()
	wg.Wait()
	r := e.account(ctx, fs, err == nil)
	r.GPU = gpu
	return r, err
}

// done checks that the epoch accounted for every position, completes
// its report (annotate), logs and writes it and records the epoch done in
// the journal.
func (e *Epoch) done(r report.EpochReport, jr *journal.Journal, annotate func(*report.EpochReport, *Epoch) error) (report.EpochReport, error) {
	cfg := e.cfg
	if r.Samples+r.SamplesFailed != r.Shard {
		return r, fmt.Errorf("engine: epoch %d: delivered %d and failed %d of %d samples", r.Epoch, r.Samples, r.SamplesFailed, r.Shard)
	}
	if annotate != nil {
		if err := annotate(&r, e); err != nil {
			return r, err
		}
	}
	if m := cfg.Metrics; m != nil {
		m.Completed()
	}
	cfg.Log.Info().Uint64("epoch", r.Epoch).Float64("seconds", r.Seconds).Int("samples", r.Samples).
		Int("failed", r.SamplesFailed).Int64("bytes", r.BytesReceived).Float64("gpu_idle", r.GPUIdleFraction).Msg("epoch done")
	if cfg.ReportPath != "" {
		if err := report.Append(cfg.ReportPath, r); err != nil {
			return r, fmt.Errorf("engine: report: %w", err)
		}
	}
	if err := jr.EpochDone(r.Epoch); err != nil {
		return r, fmt.Errorf("engine: state dir: %w", err)
	}
	return r, nil
}
