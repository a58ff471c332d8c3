package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/batch"
	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/journal"
	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/trainer"
	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Shard is what one epoch delivers here.
type Shard struct {
	Order []uint64 // position -> sample
	Split []int    // position -> k
	// Padded counts the positions that repeat a sample (schedule.RankOrder);
	// Resumed, the samples delivered before a restart and left out.
	Padded, Resumed int
}

// Opts are what a policy run changes about one epoch.
type Opts struct {
	Plan Plan
	// Rec, when set, records stage 2's profile of every sample fetched
	// raw.
	Rec *profiler.Recorder
	// Observe keeps what the epoch saw of each sample it finished, for
	// Epoch.Observations.
	Observe bool
	// LinkRate is the planner's link rate (bytes/s; 0: unknown), for the
	// offloads' horizon (see Epoch.horizon) and shedding (schedule.Shedder).
	LinkRate float64
	// StorageCores is the planner's storage cores (0: unknown), for
	// shedding.
	StorageCores float64
	// WarmCache fills the node's planned cache with the epoch's raw
	// fetches while Plan has no residency (see cache.Store.Use).
	WarmCache bool
	// KeepRaw, when set, is given a copy of the raw file of every sample
	// that arrived raw (split 0) and was finished without error, from the
	// finishing workers (concurrently): the calibration samples of a plan
	// made while the epoch runs (Swap).
	KeepRaw func(sample uint64, raw []byte)
	// First, when set, orders the epoch's first requests: each lane hands
	// out its positions in ascending First of their sample until the plan
	// is swapped (schedule.Schedule.Order; not in strict order). A
	// provisional plan's: the cheapest first.
	First func(sample uint64) float64
	// Started, when set, is called once the epoch is prepared, before it
	// runs, with a context that ends when the epoch failed and a channel
	// closed when its run ended; the function it returns is waited for
	// then, before the epoch's report is completed (a policy run's stage
	// 1 beside its first epoch).
	Started func(ctx context.Context, e *Epoch, ended <-chan struct{}) (wait func())
	// Annotate, when set, completes a successful epoch's report before it
	// is logged and written (a policy run's drift check).
	Annotate func(r *report.EpochReport, e *Epoch) error
}

// NewEpoch is epoch num's run over sh, before prepare (Run makes and
// runs one). cfg must outlive
// it.
func NewEpoch(cfg *Config, num uint64, cat *catalog.Catalog, sh Shard, opts Opts) *Epoch {
	e := &Epoch{
		cfg: cfg, num: num, cat: cat, order: sh.Order, split: sh.Split, rec: opts.Rec, observing: opts.Observe, keepRaw: opts.KeepRaw,
		linkRate: opts.LinkRate, storageCores: opts.StorageCores, resumed: sh.Resumed, padded: sh.Padded, warm: opts.WarmCache, first: opts.First,
		log:     cfg.Log.With().Uint64("epoch", num).Logger(),
		queue:   make(chan schedule.Item, cfg.Queue*cfg.Batch),
		batches: make(chan *batch.Batch),
		bySplit: report.SplitCounter{},
	}
	e.plan.Store(&opts.Plan)
	return e
}

// feed makes e fill the trainer ranks' slots through asm instead of
// forming batches: tr gives each position's rank, index in that rank's
// order and global position. Call it between NewEpoch and execute.
func (e *Epoch) feed(asm *trainer.Assembler, tr *trainer.Positions) {
	e.asm = asm
	e.posRank, e.posJ, e.gpos = tr.Rank, tr.J, tr.GPos
}

// prepare places e's positions over the storage agents fs, builds its
// schedule, shedder and the fetchers' windows, and starts the epoch's
// journaling into jr (nil: none).
func (e *Epoch) prepare(fs []*Fetcher, jr *journal.Journal) error {
	e.prepareCache()
	e.fs = fs
	cfg, num, order, plan := e.cfg, e.num, e.order, e.runPlan()
	gate := 0
	if cfg.StrictOrder {
		gate = cfg.Window * len(fs)
	}
	offloaded := make([]bool, len(order))
	for i, s := range order {
		offloaded[i] = e.split[i] != 0 || e.codec(s) != wireform.CodecNone
	}
	if n := replace(fs); n > 0 {
		e.log.Warn().Int("shards", n).Msg("shards that no reachable storage agent announced are placed over the reachable ones (their holders are gone)")
	}
	pl, unowned, err := e.placement(fs)
	if err != nil {
		return err
	}
	if len(unowned) > 0 && cfg.FailOnError {
		return fmt.Errorf("%w: epoch %d not started: %d of the shard's %d samples (the first: %d) have no live storage agent holding them; --on-error skip reports them and runs the rest",
			ErrUnavailable, num, len(unowned), len(order), order[unowned[0]])
	}
	e.sched = schedule.NewPlacedSchedule(len(order), gate, len(fs), offloaded, pl)
	e.paced = len(fs) > 1
	e.sched.CPUOf = schedule.CPUOf(plan, order)
	e.sched.Now = cfg.Now
	if e.first != nil {
		e.sched.Order(func(pos int) float64 { return e.first(order[pos]) })
	}
	if !cfg.StrictOffload {
		sh := e.newShedder(plan, e.linkRate, e.storageCores)
		sh.Prime()
		e.shed.Store(sh)
	}
	var raw uint64
	for pos, s := range order {
		b, _, _ := e.estimate(pos)
		e.left.Add(b)
		raw += e.cat.RawSizes[s]
	}
	if len(order) > 0 {
		e.meanRaw = int64(raw / uint64(len(order)))
		e.meanEst = e.left.Load() / int64(len(order))
	}
	e.jr = jr
	e.log.Info().Int("shard", len(order)).Int("storage", len(fs)).Str("plan", plan.Name()).Msg("epoch start")
	for i, f := range fs {
		f.e = e
		f.openStripes(i)
		f.capLanes(e.sched.CPUOf != nil, e.linkRate)
		f.seedLink()
	}
	return nil
}

// execute runs the prepared epoch over fs until every position is
// delivered or failed, or the first error, logging its progress every
// Config.Progress meanwhile.
func (e *Epoch) execute(ctx context.Context, fs []*Fetcher) error {
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if e.cfg.Progress > 0 {
		wg.Go(func() { e.progress(pctx, e.cfg.Progress) })
	}
	wg.Go(func() { e.watchLinks(pctx, fs) })
	e.start = e.cfg.Now()
	proc := cpuclock.Process()
	err := e.run(ctx, fs)
	e.end = e.cfg.Now()
	if proc > 0 {
		e.procNS = max(0, cpuclock.Process()-proc)
	}
	stop()
	wg.Wait()
	e.logSuppressed()
	return err
}

// account is the epoch's report after execute; with measure it also asks
// the storage agents of fs what sending cost them (transport).
func (e *Epoch) account(ctx context.Context, fs []*Fetcher, measure bool) report.EpochReport {
	start, end := e.start, e.end
	elapsed := end.Sub(start)
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	r := report.EpochReport{
		Epoch:                    e.num,
		Seconds:                  elapsed.Seconds(),
		StartUnixNS:              start.UnixNano(),
		EndUnixNS:                end.UnixNano(),
		LinkFirstSeconds:         sinceStart(start, e.firstRecv.Load()),
		LinkLastSeconds:          sinceStart(start, e.lastRecv.Load()),
		Pipeline:                 e.cfg.PipelineID,
		Plan:                     e.runPlan().Name(),
		StrictOrder:              e.cfg.StrictOrder,
		FetchOnly:                e.cfg.FetchOnly,
		Storage:                  names,
		ByStorage:                byStorage(fs),
		Shard:                    len(e.order),
		Samples:                  e.samples,
		Batches:                  e.nbatch,
		SamplesFailed:            len(e.failed),
		Failed:                   e.failed,
		BytesReceived:            e.bytesReceived.Load(),
		BySplit:                  e.bySplit.List(),
		GPUIdleSeconds:           e.idle.Seconds(),
		ComputeCPUSeconds:        float64(e.computeNS.Load()) / 1e9,
		ProcessCPUSeconds:        e.procNS.Seconds(),
		StorageCPUSeconds:        float64(e.storageNS.Load()) / 1e9,
		OffloadStorageCPUSeconds: float64(e.storageOffNS.Load()) / 1e9,
		OffloadStorageEffSeconds: float64(e.storageOffEffNS.Load()) / 1e9,
		Retried:                  int(e.retried.Load()),
		StreamFailures:           int(e.streamFailures.Load()),
		Duplicates:               int(e.duplicates.Load()),
		Stalls:                   int(e.stalls.Load()),
		Hedged:                   int(e.hedged.Load()),
		Refetched:                int(e.refetched.Load()),
		ServedRaw:                servedRaw(e),
		Cache:                    e.cc.Report(),
		Shed:                     int(e.shedder().Count()),
		Resumed:                  e.resumed,
		Padded:                   e.padded,
		Status:                   "ok",
	}
	links := make([]*report.Link, len(r.ByStorage))
	for i, s := range r.ByStorage {
		links[i] = s.Link
	}
	r.Link = linkwatch.Total(links)
	if measure {
		r.StorageNSPerByte = transport(ctx, fs)
	}
	if r.Failed == nil {
		r.Failed = []report.SampleFailure{}
	}
	slices.SortFunc(r.Failed, func(x, y report.SampleFailure) int { return cmp.Compare(x.Sample, y.Sample) })
	if e.asm != nil {
		r.Consumer = "trainer"
		r.Trainers = e.asm.Stats()
		for _, t := range r.Trainers {
			r.Samples += t.Samples - t.Repeated
			r.Batches += t.Batches
			r.GPUIdleSeconds += t.WaitSeconds / float64(len(r.Trainers))
		}
	}
	if elapsed > 0 {
		r.GPUIdleFraction = r.GPUIdleSeconds / elapsed.Seconds()
	}
	first := e.firstBatch
	if e.asm != nil {
		first = e.asm.FirstBatch()
	}
	if !first.IsZero() {
		r.FirstBatchSeconds = max(0, first.Sub(start).Seconds())
	}
	r.EpochShard, r.EpochSamples = r.Shard+r.Resumed, r.Samples+r.Resumed
	return r
}

// progress logs the epoch's progress every interval until ctx ends.
func (e *Epoch) progress(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		recv, n := e.sched.Progress()
		el := time.Since(start).Seconds()
		e.log.Info().Int("received", recv).Int("of", n).Float64("samples_per_sec", float64(recv)/el).
			Float64("queue", float64(e.Queued())).Int64("bytes", e.bytesReceived.Load()).Msg("progress")
	}
}

// Queued is how many finished samples wait in the shared queue for a
// batch or a trainer slot.
func (e *Epoch) Queued() int {
	if e.asm != nil {
		return e.asm.Queued()
	}
	return len(e.queue)
}

// Offloads is what e measured of its offloaded samples, for the planner.
func (e *Epoch) Offloads() *Offloads {
	o := &Offloads{StorageNS: e.storageOffNS.Load(), StorageEffNS: e.storageOffEffNS.Load(), PlannedNS: e.offPlannedNS.Load(),
		Bytes: e.varBytes.Load(), PlannedBytes: e.varPlanned.Load(), TotalEffNS: e.storageOffEffNS.Load()}
	if o.PlannedNS > 0 {
		o.StorageNS, o.StorageEffNS = e.planOffNS.Load(), e.planOffEffNS.Load()
	}
	return o
}

// Observations is what e saw of each sample it finished (Opts.Observe):
// its split, payload and the CPU of both sides, the storage side's on its
// own clock (storage_cpu_ns). Nil without Opts.Observe.
func (e *Epoch) Observations() []profiler.Observation {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.obs)
}

// observe keeps an Observation of the finished item it and its response,
// whose budget time counts at share of a core (Fetcher.share).
func (e *Epoch) observe(it *schedule.Item, resp *dataplanepb.FetchResponse, share float64) {
	if !e.observing {
		return
	}
	info, err := wireform.ReadHeader(resp.GetData())
	if err != nil {
		return
	}
	o := profiler.Observation{ID: it.Sample, Split: it.Split, Compressed: info.Codec != wireform.CodecNone,
		Payload: int64(info.StoredLen), StorageNS: int64(resp.GetStorageCpuNs()), LocalNS: it.CPU,
		StorageEffNS: int64(float64(resp.GetStorageBudgetNs()) * share)}
	e.mu.Lock()
	e.obs = append(e.obs, o)
	e.mu.Unlock()
}

// codec is the codec requested for sample (RunPlan.Codec).
func (e *Epoch) codec(sample uint64) wireform.Codec { return e.runPlan().Codec(sample, e.cfg.Codec) }

// sinceStart is the seconds from start to at (Unix ns), 0 when at is 0.
func sinceStart(start time.Time, at int64) float64 {
	if at == 0 {
		return 0
	}
	return max(0, time.Unix(0, at).Sub(start).Seconds())
}
