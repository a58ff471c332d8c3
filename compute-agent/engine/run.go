package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sophon-dl/sophon/compute-agent/batch"
	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/journal"
	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/trainer"
	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/internal/errkind"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Epoch is one epoch: fetchers -> work -> finishing workers -> queue
// (the one bounded shared queue) -> batcher -> batches -> feeder ->
// consumer. Every stage blocks when the next is full, so a slow consumer
// stops the workers, which stop taking responses, which leaves the
// fetchers' windows full, so no new requests go out.
type Epoch struct {
	cfg   *Config
	log   zerolog.Logger
	num   uint64
	cat   *catalog.Catalog
	order []uint64 // position -> sample
	split []int    // position -> k
	// In trainer mode (asm set): position -> local rank, index in that
	// rank's order, and global position.
	posRank []int32
	posJ    []int32
	gpos    []uint64
	asm     *trainer.Assembler
	// plan is the epoch's plan; Swap replaces it once.
	plan  atomic.Pointer[Plan]
	rec   *profiler.Recorder // stage 2; nil when not profiling
	sched *schedule.Schedule
	// paced: several storage agents, whose windows pace (Fetcher.pace).
	paced bool
	jr    *journal.Journal // nil without a sample log

	work    chan work // responses and failures for the workers; made by run
	queue   chan schedule.Item
	batches chan *batch.Batch

	bytesReceived atomic.Int64
	first         func(sample uint64) float64 // Opts.First
	// firstRecv and lastRecv are when the first and the last response
	// arrived (Unix ns; 0: none yet).
	firstRecv, lastRecv atomic.Int64
	storageNS           atomic.Int64
	storageOffNS        atomic.Int64 // storageNS of the samples with k > 0
	// storageOffEffNS sums, over the samples with k > 0, the budget time
	// their storage agent reported times its per-worker share of a core:
	// their CPU time, or more where the agent got less than its budget.
	storageOffEffNS atomic.Int64
	// offPlannedNS sums the plan's storage CPU estimate (Plan.HintAt)
	// of the samples served offloaded as planned: the drift check's
	// prediction when storage agents answered some offloads raw.
	offPlannedNS atomic.Int64
	// planOffNS and planOffEffNS are storageOffNS and storageOffEffNS of
	// the samples offPlannedNS counts (served at the split the current
	// plan lists them at).
	planOffNS, planOffEffNS atomic.Int64
	// varBytes and varPlanned sum the stored payload bytes and the plan's
	// prediction of the samples served as planned at a split of varying
	// size (Plan.VaryingAt).
	varBytes, varPlanned atomic.Int64
	// left is the estimated wire bytes of the positions not yet received;
	// with the link rate (linkRate, or as measured since start) it gives
	// each offload request its horizon.
	left         atomic.Int64
	linkRate     float64
	storageCores float64 // the planner's (0: unknown), for shedding
	meanRaw      int64   // the shard's mean raw file size (Fetcher.capLanes)
	meanEst      int64   // the shard's mean estimated response (Fetcher.resize)
	start        time.Time
	computeNS    atomic.Int64
	// procNS is the process's CPU over the epoch (execute), every thread.
	procNS         time.Duration
	retried        atomic.Int64
	streamFailures atomic.Int64
	sampleWarns    atomic.Int64 // lines about single samples, logged or not (sampleWarn)
	duplicates     atomic.Int64
	stalls         atomic.Int64 // streams declared stalled
	hedged         atomic.Int64 // requests of stalled streams put back while outstanding
	refetched      atomic.Int64 // cuts that did not finish here, fetched again raw (refetchRaw)
	// Offloads the storage agents answered raw: their CPU could not keep
	// up (work-conserving offload), or the file cannot be cut exactly.
	servedRawContended, servedRawUncuttable atomic.Int64
	// shed re-balances the rest of the epoch when the storage side falls
	// behind the plan (nil: never).
	shed  atomic.Pointer[schedule.Shedder]
	lat   schedule.Latencies // response latencies, for the adaptive stall timeout
	cc    *cache.Use         // the node's cache in this epoch; nil: none
	cache *cache.Store       // the node's cache; nil: none
	// hits carries the claimed cache hits to the workers (nil: no cache
	// this epoch). It is buffered so that a fetcher's request loop hands a
	// hit over and goes on to the next request: a loop that waited for a
	// free worker at every hit sent the storage agents their requests at
	// the finishing rate, so they could not work ahead of the link.
	hits chan work
	warm bool       // Opts.WarmCache
	fs   []*Fetcher // the epoch's, from prepare (a cache refill may use any)

	// observing: keep an Observation of every sample finished (obs,
	// under mu) for the planner's refinement.
	observing bool
	keepRaw   func(sample uint64, raw []byte) // Opts.KeepRaw

	mu     sync.Mutex
	failed []report.SampleFailure
	obs    []profiler.Observation

	// Set by NewEpoch for the report.
	resumed, padded int
	end             time.Time

	// Feeder-owned.
	samples int
	nbatch  int
	idle    time.Duration
	bySplit report.SplitCounter
	// firstBatch is when the consumer took the first batch.
	firstBatch time.Time
}

// estimate is the schedule's view of a position: its wire-size estimate,
// sample id and split.
func (e *Epoch) estimate(pos int) (int64, uint64, int) {
	s, k := e.order[pos], e.shedder().Split(pos, e.split[pos])
	if e.hit(pos) {
		return 0, s, k // read locally: nothing on the link
	}
	return e.cfg.Sizes.Estimate(k, e.cat.RawSizes[s]), s, k
}

// run runs the epoch over fetchers until every position is delivered or
// failed, or the first error.
func (e *Epoch) run(ctx context.Context, fetchers []*Fetcher) error {
	// Each fetcher's window bounds its responses claimed and not yet
	// released (finished), so a buffer of every window never holds up a
	// fetcher's recv: it claims each response as it arrives, which frees
	// the storage CPU the response held in the window while the workers
	// are busy with other samples (a sample that no agent holds still
	// waits for a place). A window grows by bandwidth x round trip while
	// the epoch runs (link.go): the buffer holds the most it may grow to.
	backlog := len(fetchers) * max(e.cfg.Window, linkwatch.MaxWindowCount)
	e.work = make(chan work, backlog)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(e.work)
		fg, fctx := errgroup.WithContext(gctx)
		w := &fetchers[0].stripes[0].w
		if orphans := e.sched.Unowned(w); len(orphans) > 0 {
			fg.Go(func() error {
				return fetchers[0].unavailable(fctx, w, orphans, "no storage agent of this epoch holds its shard")
			})
		}
		for _, f := range fetchers {
			fg.Go(func() error { return f.run(fctx) })
		}
		return fg.Wait()
	})
	g.Go(func() error {
		defer close(e.queue)
		wg, wctx := errgroup.WithContext(gctx)
		for range e.cfg.Workers {
			wg.Go(func() error { return e.worker(wctx) })
		}
		return wg.Wait()
	})
	if e.asm != nil {
		g.Go(func() error { return e.asm.Wait(gctx) })
	} else {
		g.Go(func() error { return e.batcher(gctx) })
		g.Go(func() error { return e.feeder(gctx) })
	}
	return g.Wait()
}

// MaxSampleWarnings bounds the warn lines about single samples (a bad
// sample, a cut fetched again raw) that an epoch logs: the first ones
// name the samples, and the epoch's end says how many more there were
// (logSuppressed), so that a dataset of 10,000 bad files writes 21 lines,
// not 10,000. The epoch report's failed list has every one.
const MaxSampleWarnings = 20

// sampleWarn is a warn-level event for a line about one sample, or nil
// (zerolog writes nothing for it) past the epoch's MaxSampleWarnings.
func (e *Epoch) sampleWarn() *zerolog.Event {
	if e.sampleWarns.Add(1) > MaxSampleWarnings {
		return nil
	}
	return e.log.Warn()
}

// logSuppressed logs, once the epoch has run, how many lines about single
// samples sampleWarn left out, if any.
func (e *Epoch) logSuppressed() {
	n := e.sampleWarns.Load() - MaxSampleWarnings
	if n <= 0 {
		return
	}
	e.mu.Lock()
	failed := len(e.failed)
	e.mu.Unlock()
	e.log.Warn().Int64("suppressed", n).Int("failed", failed).
		Msgf("%d more warnings about single samples this epoch were not logged (after the first %d); the epoch report lists every failed sample", n, MaxSampleWarnings)
}

// fail records a bad sample. In fail mode it returns the epoch's error.
func (e *Epoch) fail(f report.SampleFailure) error {
	if m := e.cfg.Metrics; m != nil {
		m.Failure()
	}
	if f.Path == "" {
		f.Path = e.cat.Path(f.Sample)
	}
	e.mu.Lock()
	e.failed = append(e.failed, f)
	e.mu.Unlock()
	e.sampleWarn().Uint64("sample", f.Sample).Str("file", f.Path).Str("kind", f.Kind).Str("where", f.Where).Msg(f.Message)
	if e.cfg.FailOnError {
		return fmt.Errorf("%w: epoch %d: %v", ErrSample, e.num, f)
	}
	return nil
}

// next is a worker's next job: a response or failure (Epoch.work) or a
// queued cache hit (Epoch.hits), a waiting response first: it holds
// a slot of its fetcher's window until finished, a hit holds none. It
// reports false once the fetchers are done (work closed) and no hit is
// queued, or with ctx's error. No hit is queued after work closes: the
// fetchers queue them before they return.
func (e *Epoch) next(ctx context.Context) (work, bool, error) {
	select {
	case w, ok := <-e.work:
		if ok {
			return w, true, nil
		}
	default:
	}
	select {
	case <-ctx.Done():
		return work{}, false, ctx.Err()
	case w := <-e.hits: // nil without a cache: never ready
		return w, true, nil
	case w, ok := <-e.work:
		if ok {
			return w, true, nil
		}
	}
	select {
	case w := <-e.hits:
		return w, true, nil
	default:
		return work{}, false, nil
	}
}

// worker finishes samples (or, with FetchOnly, only validates them),
// timing the work with its thread's CPU clock (it keeps its OS thread).
func (e *Epoch) worker(ctx context.Context) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lim := wireform.Limits{MaxPayload: e.cfg.MaxPayload}
	wake := trainer.NewWaiter()
	for {
		w, ok, err := e.next(ctx)
		if !ok {
			return err
		}
		r := w.r
		// The split the sample arrived at: the planned one, or 0 when the
		// storage agent answered raw instead (work-conserving offload, a
		// file it cannot cut).
		k := r.Split
		if w.resp.GetServed() != dataplanepb.Served_SERVED_AS_REQUESTED {
			k = 0
		}
		it := schedule.Item{Pos: r.Pos, Sample: r.Sample, Label: e.cat.Labels[r.Sample], Split: k, Wire: int64(len(w.resp.GetData()))}
		if e.asm != nil {
			it.Rank, it.J, it.GPos = e.posRank[r.Pos], e.posJ[r.Pos], e.gpos[r.Pos]
		}
		var bad *report.SampleFailure
		if w.fail != nil {
			bad = w.fail
		} else if w.local {
			bad = e.serveCached(ctx, w.f, lim, &it)
		} else if se := w.resp.GetError(); se != nil {
			bad = &report.SampleFailure{Sample: r.Sample, Split: r.Split, Kind: errkind.Name(se.GetKind()), Message: se.GetMessage(), Where: "storage"}
		} else {
			e.cfg.Sizes.Observe(k, e.cat.RawSizes[r.Sample], len(w.resp.GetData()))
			if e.cfg.FetchOnly {
				bad = e.check(w.resp.GetData(), lim, &it)
			} else {
				var in, out ops.Value
				in, out, bad = e.finish(w.f, w.resp.GetData(), lim, &it)
				if bad == nil {
					e.observe(&it, w.resp, w.f.share())
					e.kept(&it, in)
				} else if it.Split == ops.SplitCut && bad.Where == "local" {
					bad = e.refetchRaw(ctx, w.f, lim, &it, bad)
				}
				e.cc.Fetched(r.Pos, r.Sample, it.Split, in, out, bad == nil)
			}
		}
		if bad != nil {
			if err := e.fail(*bad); err != nil {
				e.sched.Release(w.win, r)
				return err
			}
			it.Failed, it.Tensor, it.Image = true, nil, nil
		}
		if e.asm != nil {
			if err := e.asm.Place(ctx, it, wake); err != nil {
				e.sched.Release(w.win, r)
				return err
			}
			e.sched.Release(w.win, r)
			continue
		}
		select {
		case e.queue <- it:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.sched.Release(w.win, r)
	}
}

// finish decodes a response's wire form from f, checks raw bytes against
// the catalog's content hash (see Fetcher.checkRaw) and runs ops[k:n] on it, timing
// both on the thread's CPU clock, and fills it with the tensor. in is the
// decoded wire form and out the pipeline's output (for the cache).
func (e *Epoch) finish(f *Fetcher, data []byte, lim wireform.Limits, it *schedule.Item) (in, out ops.Value, bad *report.SampleFailure) {
	t0 := cpuclock.Thread()
	in, err := wireform.Decode(data, lim)
	if raw, ok := in.(ops.Encoded); ok && err == nil && it.Split == 0 {
		err = f.checkRaw(it.Sample, raw)
	}
	out, bad = e.complete(in, err, it, t0)
	return in, out, bad
}

// complete runs ops[it.Split:n] on in (unless err, the failure to get in)
// and fills it with the output, charging the CPU time since t0 (the
// thread's clock) to the epoch; stage 2 records a raw in.
func (e *Epoch) complete(in ops.Value, err error, it *schedule.Item, t0 time.Duration) (ops.Value, *report.SampleFailure) {
	p := e.cfg.Pipeline
	key := ops.Key{Seed: e.cfg.Seed, Epoch: e.num, Sample: it.Sample}
	var v ops.Value
	if err == nil {
		v, err = p.RunLimited(key, in, it.Split, p.Len(), e.cfg.Limits.At(time.Now()))
	}
	it.CPU = int64(cpuclock.Thread() - t0)
	e.computeNS.Add(it.CPU)
	if raw, ok := in.(ops.Encoded); ok && err == nil && e.rec != nil {
		// Stage 2 runs the pipeline again, op by op, on the raw bytes; the
		// delivered tensor is still p.Run's, and the record's CPU time is
		// not charged to the epoch's compute CPU.
		if rerr := e.rec.Record(it.Sample, raw, key); rerr != nil {
			e.log.Debug().Err(rerr).Uint64("sample", it.Sample).Msg("sample not profiled")
		}
	}
	if err == nil {
		switch v := v.(type) {
		case *ops.Tensor:
			it.Tensor = v
		case *ops.Image:
			if e.asm == nil {
				err = fmt.Errorf("%w: pipeline gave %s", ops.ErrKind, v.Kind())
			}
			it.Image = v
		default:
			err = fmt.Errorf("%w: pipeline gave %s", ops.ErrKind, v.Kind())
		}
	}
	if err != nil {
		return nil, &report.SampleFailure{Sample: it.Sample, Split: it.Split, Kind: LocalKind(err), Message: err.Error(), Where: "local"}
	}
	if (e.cfg.OnSample != nil || e.jr != nil) && e.asm == nil { // the assembler hashes the rows it publishes
		it.SHA = batch.RowSHA(it.Tensor)
	}
	return v, nil
}

// check validates a response's wire form without finishing it (FetchOnly).
func (e *Epoch) check(data []byte, lim wireform.Limits, it *schedule.Item) *report.SampleFailure {
	t0 := cpuclock.Thread()
	_, err := wireform.Check(data, lim)
	e.computeNS.Add(int64(cpuclock.Thread() - t0))
	if err != nil {
		return &report.SampleFailure{Sample: it.Sample, Split: it.Split, Kind: LocalKind(err), Message: err.Error(), Where: "local"}
	}
	if e.cfg.OnSample != nil || e.jr != nil {
		it.SHA = sha256.Sum256(data)
	}
	return nil
}

// batcher stacks items into batches (batch.Stacker): in completion
// order, or in strict order through a reorder buffer that the schedule's
// gate bounds, which learns how far the epoch got.
func (e *Epoch) batcher(ctx context.Context) error {
	defer close(e.batches)
	s := &batch.Stacker{Epoch: e.num, Size: e.cfg.Batch, Strict: e.cfg.StrictOrder, Out: e.batches}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case it, ok := <-e.queue:
			if !ok {
				return s.Close(ctx)
			}
			next := s.Next()
			if err := s.Add(ctx, it); err != nil {
				return err
			}
			if s.Next() > next {
				e.sched.Delivered(s.Next())
			}
		}
	}
}

// feeder hands batches to the consumer, timing how long it waits for
// each: the GPU's idle time.
func (e *Epoch) feeder(ctx context.Context) error {
	for {
		t0 := e.cfg.Now()
		var b *batch.Batch
		select {
		case <-ctx.Done():
			return ctx.Err()
		case got, ok := <-e.batches:
			if !ok {
				return nil
			}
			b = got
		}
		e.idle += e.cfg.Now().Sub(t0)
		if !e.cfg.FetchOnly {
			if err := e.cfg.Consumer.Consume(ctx, b); err != nil {
				return fmt.Errorf("engine: consumer: %w", err)
			}
		}
		// Journaled right after the consumer took the batch, in one write:
		// what a crash leaves in the log is what was delivered.
		if err := e.jr.Write(e.num, b.Samples, b.SHAs); err != nil {
			return fmt.Errorf("engine: samples out: %w", err)
		}
		if e.nbatch == 0 {
			e.firstBatch = e.cfg.Now()
		}
		e.nbatch++
		e.samples += b.Len()
		if m := e.cfg.Metrics; m != nil {
			m.Delivered(b.Len())
		}
		for i, s := range b.Samples {
			e.bySplit.Add(b.Splits[i], b.Wire[i])
			if e.cfg.OnSample != nil {
				e.cfg.OnSample(e.num, s, b.SHAs[i])
			}
		}
	}
}

// LocalKind names an ops error with the storage agent's kinds, or WIRE for
// a wire form that does not decode.
func LocalKind(err error) string {
	if errors.Is(err, wireform.ErrHeader) || errors.Is(err, wireform.ErrSize) ||
		errors.Is(err, wireform.ErrChecksum) || errors.Is(err, wireform.ErrCodec) {
		return "WIRE"
	}
	if errors.Is(err, ErrContentMismatch) {
		return "CONTENT"
	}
	return errkind.Name(errkind.Of(err))
}

// horizon is how long the link will still be busy with what the epoch has
// left, in ns (FetchRequest.horizon_ns): the estimated bytes of the
// positions not yet received over the larger of the planner's link rate
// and the rate measured so far this epoch. 0 when no rate is known yet.
func (e *Epoch) horizon() uint64 {
	return e.linkNS(e.left.Load())
}

// rawExtra is how much longer the link would be busy if an offload whose
// wire bytes are estimated at est were answered raw, in ns
// (FetchRequest.raw_extra_ns): the raw file's wire bytes beyond est over
// the same rate as the horizon's. 0 when no rate is known or the raw
// answer is not larger.
func (e *Epoch) rawExtra(sample uint64, est int64) uint64 {
	return e.linkNS(e.cfg.Sizes.Estimate(0, e.cat.RawSizes[sample]) - est)
}

// linkNS is how long the link takes for n bytes, in ns, at the larger of
// the planner's link rate and the rate measured so far this epoch (after
// its first 500 ms); 0 when no rate is known or n <= 0.
func (e *Epoch) linkNS(n int64) uint64 {
	rate := e.linkRate
	if el := e.cfg.Now().Sub(e.start); el > 500*time.Millisecond {
		rate = max(rate, float64(e.bytesReceived.Load())/el.Seconds())
	}
	if rate <= 0 || n <= 0 {
		return 0
	}
	return uint64(float64(n) / rate * 1e9)
}

var _ trainer.Epoch = (*Epoch)(nil)

// Num is the epoch's number (trainer.Epoch).
func (e *Epoch) Num() uint64 { return e.num }

// Delivered moves the schedule's strict-order gate (trainer.Epoch).
func (e *Epoch) Delivered(pos int) { e.sched.Delivered(pos) }

// Placed counts a sample in a trainer's row (trainer.Epoch).
func (e *Epoch) Placed(split int, wire int64) { e.bySplit.Add(split, wire) }

// Hashed reports whether published rows are journaled or reported
// (trainer.Epoch).
func (e *Epoch) Hashed() bool { return e.cfg.OnSample != nil || e.jr != nil }

// Consumed journals a published batch's samples and calls Config.OnSample
// for them (trainer.Epoch).
func (e *Epoch) Consumed(ids []uint64, shas [][32]byte) error {
	if err := e.jr.Write(e.num, ids, shas); err != nil {
		return err
	}
	if e.cfg.OnSample != nil {
		for j := range ids {
			e.cfg.OnSample(e.num, ids[j], shas[j])
		}
	}
	return nil
}
