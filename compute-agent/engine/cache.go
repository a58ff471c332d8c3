package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// cacheState is an epoch's use of the node's cache (Config.Cache).
//
// A position the cache is to hold (want: the plan's resident samples,
// fetched at split 0 however the plan splits them, or under the LRU
// policy every raw fetch) is served locally when the index has its
// entry: its fetcher claims it without a request (stripe.local) and a
// worker reads and checks the entry and finishes it from the cache split
// (serveCached). Otherwise it is fetched raw like any sample and, once it
// finished, put: the raw file (split 0, checked against the catalog's
// content hash on its way in) or the finished output computed here from
// it. An entry that is bad when read is dropped and the sample fetched
// again raw on a stream of its own (a refill), never served.
type cacheState struct {
	view *cache.View // nil: no cache this epoch
	want []bool      // by position
	// warm: the epoch keeps every raw fetch until a plan with a cache
	// takes over (prepareCache, fillsCache).
	warm bool
	// queued carries the claimed hits to the workers (nil: no cache this
	// epoch). It is buffered so that a fetcher's request loop hands a hit
	// over and goes on to the next request: a loop that waited for a free
	// worker at every hit sent the storage agents their requests at the
	// finishing rate, so they could not work ahead of the link.
	queued chan work
	// The epoch's counts (report.CacheStats).
	wanted                                         int
	hits, misses, fills, refills, forged, readByte atomic.Int64
}

// prepareCache sets up the epoch's use of the cache and moves the
// positions it is to hold to split 0. Called by prepare first.
//
// A warm epoch (Opts.WarmCache: a policy run's epochs before its first
// plan) with the planned policy and a plan without residency fills the
// cache with what it fetches raw anyway, evicting nothing, so that the
// first plan finds its resident samples there (all of them when the
// budget holds the dataset); the plan's Puts later evict what it does not
// keep.
func (e *Epoch) prepareCache() {
	c := e.cache
	if c == nil || e.cfg.FetchOnly {
		return
	}
	split, keep := 0, e.runPlan().Cached
	warm := false
	if !c.LRU() {
		warm = e.warm && !e.runPlan().Caches()
		if !e.runPlan().Caches() && !warm {
			return
		}
		split = e.cfg.Pipeline.CacheSplit()
		if warm {
			keep = func(uint64) bool { return true }
		}
	}
	e.cc.view, e.cc.warm = c.View(e.cat.Fingerprint, e.cfg.PipelineID, split, keep), warm
	e.cc.want = make([]bool, len(e.order))
	for pos, s := range e.order {
		if c.LRU() || warm {
			e.cc.want[pos] = e.split[pos] == 0 && e.codec(s) == wireform.CodecNone
		} else if e.runPlan().Cached(s) {
			e.cc.want[pos], e.split[pos] = true, 0
		}
		if e.cc.want[pos] {
			e.cc.wanted++
		}
	}
	queued := e.cc.wanted
	if warm {
		queued = len(e.order) // Swap may want more (fillsCache)
	}
	e.cc.queued = make(chan work, min(queued, maxQueuedHits))
}

// fillsCache reports whether Swap to plan fills the cache with plan's
// resident samples: a warm epoch of the planned policy (prepareCache kept
// every raw fetch) and a plan that keeps samples resident.
func (e *Epoch) fillsCache(plan Plan) bool {
	return e.cc.warm && plan.Caches()
}

// maxQueuedHits bounds the hits waiting for a worker (stripe.local).
const maxQueuedHits = 8192

// hit reports whether position pos is served from the cache. A profiling
// epoch (stage 2 records every sample from its raw bytes) takes no hit of
// finished outputs.
func (e *Epoch) hit(pos int) bool {
	return e.cc.want != nil && e.cc.want[pos] && (e.rec == nil || e.cc.view.Split() == 0) && e.cc.view.Has(e.order[pos])
}

// local claims r, a cache hit, without sending it and queues it for the
// workers (cacheState.queued). The hand-off waits on the epoch's ctx only
// when maxQueuedHits hits wait already: a claimed position is never
// dropped.
func (s *stripe) local(epochCtx context.Context, r *schedule.Request) error {
	e := s.f.e
	r, dup := e.sched.Claim(&s.w, r.Tag, 0)
	if dup || r == nil {
		return nil
	}
	e.left.Add(-r.Est)
	select {
	case e.cc.queued <- work{f: s.f, win: &s.w, r: r, local: true}:
		return nil
	case <-epochCtx.Done():
		return epochCtx.Err()
	}
}

// serveCached finishes it from its cache entry (cache.View.GetValue); a
// bad entry is dropped and the sample fetched again raw from f's storage
// agent (refill).
func (e *Epoch) serveCached(ctx context.Context, f *Fetcher, lim wireform.Limits, it *schedule.Item) *report.SampleFailure {
	v := e.cc.view
	t0 := cpuclock.Thread()
	in, n, err := v.GetValue(it.Sample, lim, e.cat.Hash)
	if err != nil {
		e.computeNS.Add(int64(cpuclock.Thread() - t0))
		if errors.Is(err, cache.ErrEntry) {
			e.cc.refills.Add(1)
			if errors.Is(err, cache.ErrForged) {
				e.cc.forged.Add(1)
			}
		} else {
			e.cc.misses.Add(1) // the cache went away under it
			v.Miss()
		}
		return e.refill(ctx, f, lim, it)
	}
	e.cc.hits.Add(1)
	e.cc.readByte.Add(n)
	it.Split, it.Wire = v.Split(), 0
	_, bad := e.complete(in, nil, it, t0)
	return bad
}

// refill fetches it raw again, from f's storage agent or else from the
// epoch's other storage agents that hold it, finishes it and puts it in
// the cache.
func (e *Epoch) refill(ctx context.Context, f *Fetcher, lim wireform.Limits, it *schedule.Item) *report.SampleFailure {
	data, err := e.fetchRaw(ctx, f, it.Sample)
	for _, g := range e.fs {
		if err == nil {
			break
		}
		if g != f && g.Holds(it.Sample) && e.cfg.Refusals.Refusal(g.name) == nil {
			var gerr error
			if data, gerr = e.fetchRaw(ctx, g, it.Sample); gerr == nil {
				f, err = g, nil
			}
		}
	}
	if err != nil {
		return &report.SampleFailure{Sample: it.Sample, Kind: report.KindUnavailable, Where: "cache",
			Message: fmt.Sprintf("cache entry dropped and its raw refetch failed: %v", err)}
	}
	it.Split, it.Wire = 0, int64(len(data))
	in, out, bad := e.finish(f, data, lim, it)
	if bad == nil {
		e.fillCache(it.Sample, in, out)
	}
	return bad
}

// fetchRaw fetches sample raw from f's storage agent on a stream of its
// own, counting its bytes.
func (e *Epoch) fetchRaw(ctx context.Context, f *Fetcher, sample uint64) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, e.cfg.RetryBudget)
	defer cancel()
	stream, err := f.client.Fetch(rctx)
	if err != nil {
		return nil, err
	}
	req := &dataplanepb.FetchRequest{Tag: 1, Sample: sample, Epoch: e.num, Seed: e.cfg.Seed,
		PipelineId: e.cfg.PipelineID, PipelineSpec: e.cfg.PipelineSpec}
	if err := stream.Send(req); err != nil {
		return nil, err
	}
	stream.CloseSend()
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if se := resp.GetError(); se != nil || resp.GetSample() != sample {
		return nil, fmt.Errorf("storage agent answered sample %d: %s", resp.GetSample(), se.GetMessage())
	}
	e.bytesReceived.Add(int64(len(resp.GetData())))
	return resp.GetData(), nil
}

// wantsFill reports whether a fetched position that finished (at split k)
// goes into the cache.
func (e *Epoch) wantsFill(pos, k int) bool {
	return e.cc.want != nil && e.cc.want[pos] && k == 0
}

// fillCache puts a sample that finished from its raw bytes in (checked
// against the catalog) with output out in the cache (cache.View.PutValue).
func (e *Epoch) fillCache(sample uint64, in, out ops.Value) {
	if e.cc.view.PutValue(sample, in, out) {
		e.cc.fills.Add(1)
	}
}

// cacheStats is the epoch's report.CacheStats; nil without a cache.
func (e *Epoch) cacheStats() *report.CacheStats {
	v := e.cc.view
	if v == nil {
		return nil
	}
	e.cache.Drain() // the epoch's fills are resident, or failed
	st := e.cache.Stats()
	pol := cache.PolicyPlanned
	if v.LRU() {
		pol = cache.PolicyLRU
	}
	return &report.CacheStats{Policy: pol, Split: v.Split(), Wanted: e.cc.wanted, Hits: int(e.cc.hits.Load()), Misses: int(e.cc.misses.Load()),
		Fills: int(e.cc.fills.Load()), Refills: int(e.cc.refills.Load() + e.cache.TakeOpenDrops()), Forged: int(e.cc.forged.Load()), ReadBytes: e.cc.readByte.Load(),
		ResidentSamples: st.Samples, ResidentBytes: st.Bytes, BudgetBytes: e.cache.Budget(), Degraded: st.Degraded}
}
