package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// A Fetcher may reach its storage agent over several connections
// (Fetcher.Stripe; compute-agent --conns): one gRPC ClientConn, so one
// TCP connection, each. A lossy link with a long round trip holds one
// loss-based TCP connection to about MSS/RTT x 1.22/sqrt(loss) (Mathis
// et al., 1997; linkwatch.AutoConns) whatever the link's rate; several connections share the
// link as several flows. Each connection carries one stripe of the
// epoch: a Fetch stream at a time with its share of the agent's window
// (count, bytes, storage CPU and raw bytes in flight), pulling positions
// from the one schedule as a Fetcher does. A stripe's failed or stalled
// stream requeues or hedges only its own requests; the agent's retry
// budget counts the agent's progress on every stripe, and when it is
// spent every stripe stops and the agent is given up once.

// Stripe adds the clients of the further connections to f's storage agent
// (each its own ClientConn) that the epochs f joins spread their requests
// over, with f's client, up to linkwatch.MaxConns in all and at most one per
// request of Config.Window.
func (f *Fetcher) Stripe(clients ...dataplanepb.StorageClient) {
	f.clients = append(f.clients, clients...)
	if len(f.clients) > linkwatch.MaxConns {
		f.clients = f.clients[:linkwatch.MaxConns]
	}
}

// Conns is the connections f's epochs use (1 without Stripe).
func (f *Fetcher) Conns() int { return len(f.clients) }

// Clients is the clients of f's connections, Client's first
// (stage1.Striped: stage 1's link probe runs over them).
func (f *Fetcher) Clients() []dataplanepb.StorageClient { return slices.Clip(f.clients) }

// stripe is one of a Fetcher's connections during an epoch: one Fetch
// stream at a time, on its own client, with its share of the agent's
// window.
type stripe struct {
	f      *Fetcher
	idx    int
	client dataplanepb.StorageClient
	w      schedule.Window

	// lastRecv is when the current stream last received a response or
	// handed one on (Unix ns); handing is set while recv waits to hand a
	// response to the workers (back-pressure, not a stall).
	lastRecv atomic.Int64
	handing  atomic.Bool
}

// openStripes gives f one stripe per client for epoch e, f being the
// idx-th fetcher (the bit of the placement's masks), each with its share
// of the agent's window: count (linkwatch.Stripes) and bytes.
func (f *Fetcher) openStripes(idx int) {
	cfg := f.e.cfg
	counts := linkwatch.Stripes(cfg.Window, len(f.clients))
	f.stripes = make([]*stripe, len(counts))
	for i, count := range counts {
		f.stripes[i] = &stripe{f: f, idx: i, client: f.clients[i], w: schedule.Window{
			Idx: idx, MaxCount: count, MaxBytes: cfg.WindowBytes / int64(len(counts)), Outstanding: map[uint64]*schedule.Request{}}}
	}
}

// stripeShare is a stripe's part of an agent-wide bound b
// (linkwatch.Share).
func (f *Fetcher) stripeShare(b int64) int64 { return linkwatch.Share(b, len(f.stripes)) }

// gaveUp is a stripe's verdict that its storage agent made no progress
// for the retry budget (or now serves another dataset): the Fetcher
// stops its other stripes and gives the agent up.
type gaveUp struct{ err error }

func (g *gaveUp) Error() string { return g.err.Error() }
func (g *gaveUp) Unwrap() error { return g.err }

// runStripes runs f's stripes until the epoch has every sample, ctx ends
// or one of them gives up on the agent: then the others stop, every
// request they had outstanding goes back to the schedule, and f gives
// the agent up (giveUp).
func (f *Fetcher) runStripes(ctx context.Context) error {
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make([]error, len(f.stripes))
	var wg sync.WaitGroup
	for i, s := range f.stripes {
		wg.Go(func() {
			if errs[i] = s.run(sctx, ctx); errs[i] != nil {
				stop()
			}
		})
	}
	wg.Wait()
	var up *gaveUp
	for _, err := range errs {
		if errors.As(err, &up) {
			break
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if up == nil {
		return errors.Join(errs...)
	}
	for _, s := range f.stripes {
		f.e.sched.Requeue(&s.w)
	}
	return f.giveUp(ctx, up.err)
}
