package computeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// ErrNoStorage: no storage agent can serve the epoch.
var ErrNoStorage = errors.New("computeagent: no usable storage agent")

// fetcher keeps one Fetch stream to one storage agent busy for one epoch,
// with a bounded window of requests in flight. On a stream error it
// requeues that stream's outstanding requests (any fetcher may take them)
// and opens a new stream after a back-off.
type fetcher struct {
	e      *epochRun
	ep     Endpoint
	client dataplanepb.StorageClient
	cpus   float64 // the storage agent's cores (InfoResponse.cpus)
	w      window
}

// work is a response on its way to a finishing worker.
type work struct {
	f    *fetcher
	r    *request
	resp *dataplanepb.FetchResponse
}

func (f *fetcher) run(ctx context.Context) error {
	log := f.e.log.With().Str("storage", f.ep.Name).Logger()
	failures := 0
	for {
		progress, err := f.session(ctx)
		if err == nil || f.e.sched.complete() {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n := f.e.sched.requeue(&f.w)
		f.e.streamFailures.Add(1)
		f.e.retried.Add(int64(n))
		if m := f.e.a.metrics(); m != nil {
			m.retries.Add(float64(n))
		}
		if progress {
			failures = 0
		}
		failures++
		log.Warn().Err(err).Int("requeued", n).Int("failures", failures).Msg("fetch stream failed")
		if failures > f.e.cfg.Retries {
			if f.e.sched.giveUp() == 0 {
				return fmt.Errorf("%w: %s failed %d times, last: %v", ErrNoStorage, f.ep.Name, failures, err)
			}
			log.Error().Err(err).Msg("giving up on storage agent for this epoch")
			return nil
		}
		backoff := min(50*time.Millisecond<<min(failures-1, 6), 2*time.Second)
		if err := f.e.cfg.Clock.Sleep(ctx, backoff); err != nil {
			return err
		}
	}
}

// session runs one Fetch stream until the epoch's samples are all received
// (nil) or the stream fails. progress reports whether any response came.
func (f *fetcher) session(ctx context.Context) (progress bool, err error) {
	g, gctx := errgroup.WithContext(ctx)
	stream, err := f.client.Fetch(gctx)
	if err != nil {
		return false, err
	}
	var got atomic.Bool
	g.Go(func() error { return f.send(gctx, stream) })
	g.Go(func() error { return f.recv(ctx, stream, &got) })
	err = g.Wait()
	return got.Load(), err
}

func (f *fetcher) send(ctx context.Context, stream dataplanepb.Storage_FetchClient) error {
	e := f.e
	first := true
	for {
		r, wait, done := e.sched.take(&f.w, e.estimate)
		if done {
			return stream.CloseSend()
		}
		if r == nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-wait:
			}
			continue
		}
		req := &dataplanepb.FetchRequest{
			Tag:        r.tag,
			Sample:     r.sample,
			Epoch:      e.num,
			Seed:       e.cfg.Seed,
			Split:      uint32(r.split),
			PipelineId: e.a.pipeID,
			Codec:      dataplanepb.Codec(e.codec(r.sample)),
		}
		if first {
			req.PipelineSpec = e.a.pipeSpec
			first = false
		}
		if err := stream.Send(req); err != nil {
			if err == io.EOF {
				// The real error comes from Recv.
				<-ctx.Done()
				return ctx.Err()
			}
			return err
		}
	}
}

// recv matches responses to requests and hands them to the workers. The
// hand-off waits on the epoch's ctx, not the stream's: a claimed response
// is never dropped because its stream failed afterwards.
func (f *fetcher) recv(epochCtx context.Context, stream dataplanepb.Storage_FetchClient, got *atomic.Bool) error {
	e := f.e
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			if n := e.sched.outstanding(&f.w); n > 0 || !e.sched.complete() {
				return fmt.Errorf("computeagent: %s closed the stream with %d requests outstanding", f.ep.Name, n)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if resp.GetError().GetKind() == dataplanepb.ErrorKind_ERROR_KIND_DEADLINE &&
			e.sched.retryTag(&f.w, resp.GetTag(), e.cfg.Retries) {
			// The storage agent was too busy: transient, ask again.
			e.retried.Add(1)
			if m := e.a.metrics(); m != nil {
				m.retries.Inc()
			}
			continue
		}
		r, dup := e.sched.claim(&f.w, resp.GetTag(), int64(len(resp.GetData())))
		if dup {
			e.duplicates.Add(1)
			continue
		}
		if r == nil {
			e.log.Warn().Str("storage", f.ep.Name).Uint64("tag", resp.GetTag()).Msg("response for an unknown tag dropped")
			continue
		}
		got.Store(true)
		if resp.GetSample() != r.sample && resp.GetError() == nil {
			resp = &dataplanepb.FetchResponse{Tag: resp.GetTag(), Sample: r.sample, Error: &dataplanepb.SampleError{
				Kind:    dataplanepb.ErrorKind_ERROR_KIND_INTERNAL,
				Message: fmt.Sprintf("response names sample %d", resp.GetSample()),
			}}
		}
		e.bytesReceived.Add(int64(len(resp.GetData())))
		if m := e.a.metrics(); m != nil {
			m.received(r.split, len(resp.GetData()))
		}
		e.storageNS.Add(int64(resp.GetStorageCpuNs()))
		if r.split > 0 {
			e.storageOffNS.Add(int64(resp.GetStorageCpuNs()))
			e.storageOffEffNS.Add(int64(float64(resp.GetStorageBudgetNs()) * f.share()))
		}
		select {
		case e.work <- work{f: f, r: r, resp: resp}:
		case <-epochCtx.Done():
			return epochCtx.Err()
		}
	}
}

// storageKind names a storage agent's error kind without the enum prefix.
func storageKind(k dataplanepb.ErrorKind) string {
	return strings.TrimPrefix(k.String(), "ERROR_KIND_")
}

// share is each of the storage agent's workers' share of a core: cpus over
// ceil(cpus) workers (1 when cpus is unknown).
func (f *fetcher) share() float64 {
	if !(f.cpus > 0) {
		return 1
	}
	return f.cpus / math.Ceil(f.cpus)
}
