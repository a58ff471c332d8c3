package engine

import (
	"context"
	"fmt"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// prepareCache sets up the epoch's use of the node's cache
// (Config.Cache; cache.Store.Use) and moves the positions it is to hold
// to split 0. Called by prepare first. A position the cache is to hold is
// served locally when the index has its entry: its fetcher claims it
// without a request (stripe.local) and a worker reads and checks the
// entry and finishes it from the cache split (serveCached); a bad entry
// is fetched again raw on a stream of its own (refill).
func (e *Epoch) prepareCache() {
	c := e.cache
	if c == nil || e.cfg.FetchOnly {
		return
	}
	e.cc = c.Use(e.cat.Fingerprint, e.cfg.PipelineID, e.cfg.Pipeline.CacheSplit(), e.runPlan(), e.warm, e.order,
		func(pos int) bool { return e.split[pos] == 0 && e.codec(e.order[pos]) == wireform.CodecNone })
	if e.cc == nil {
		return
	}
	for pos := range e.order {
		if e.cc.Want(pos) {
			e.split[pos] = 0
		}
	}
	queued := e.cc.Wanted()
	if e.cc.Warm() {
		queued = len(e.order) // Swap may want more (cache.Use.Fills)
	}
	e.hits = make(chan work, min(queued, maxQueuedHits))
}

// maxQueuedHits bounds the hits waiting for a worker (stripe.local).
const maxQueuedHits = 8192

// hit reports whether position pos is served from the cache.
func (e *Epoch) hit(pos int) bool { return e.cc.Hit(pos, e.order[pos], e.rec != nil) }

// local claims r, a cache hit, without sending it and queues it for the
// workers (Epoch.hits). The hand-off waits on the epoch's ctx only
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
	case e.hits <- work{f: s.f, win: &s.w, r: r, local: true}:
		return nil
	case <-epochCtx.Done():
		return epochCtx.Err()
	}
}

// serveCached finishes it from its cache entry (cache.Use.Get); a bad
// entry is dropped and the sample fetched again raw from f's storage
// agent (refill).
func (e *Epoch) serveCached(ctx context.Context, f *Fetcher, lim wireform.Limits, it *schedule.Item) *report.SampleFailure {
	t0 := cpuclock.Thread()
	in, err := e.cc.Get(it.Sample, lim, e.cat.Hash)
	if err != nil {
		e.computeNS.Add(int64(cpuclock.Thread() - t0))
		return e.refill(ctx, f, lim, it)
	}
	it.Split, it.Wire = e.cc.Split(), 0
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
		e.cc.Put(it.Sample, in, out)
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
