package stage1

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
)

// tcpSource is a Source that knows the sockets of its connection (the
// compute agent's fetcher): stage 1 reads their TCP_INFO.
type tcpSource interface {
	TCP() *tcpinfo.Conns
}

// linkReadTimeout bounds one reading's Info call.
const linkReadTimeout = 2 * time.Second

// LinkWatch reads the link to every source at its start and at Stop: the
// round trip and the loss between (linkwatch).
type LinkWatch struct {
	fs     []Source
	now    func() time.Time
	before []linkwatch.Reading
}

// peer is f as linkwatch reads it.
func peer(f Source) linkwatch.Peer {
	p := linkwatch.Peer{Client: f.Client()}
	if t, ok := f.(tcpSource); ok {
		p.TCP = t.TCP()
	}
	return p
}

// readAll reads every source's link at once.
func readAll(ctx context.Context, fs []Source, now func() time.Time) []linkwatch.Reading {
	out := make([]linkwatch.Reading, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, linkReadTimeout)
			defer cancel()
			out[i] = linkwatch.Read(rctx, peer(f), now)
		})
	}
	wg.Wait()
	return out
}

// WatchLink reads the link to every source of fs now (now is the clock
// the Info calls are timed on).
func WatchLink(ctx context.Context, fs []Source, now func() time.Time) *LinkWatch {
	return &LinkWatch{fs: fs, now: now, before: readAll(ctx, fs, now)}
}

// Finish is Stop into res's Link and Links, logged (Result.LogLink).
func (w *LinkWatch) Finish(ctx context.Context, res *Result, log zerolog.Logger) {
	res.Link, res.Links = w.Stop(ctx)
	res.LogLink(log)
}

// Stop reads the links again and returns each source's span since
// WatchLink and all of them together.
func (w *LinkWatch) Stop(ctx context.Context) (all linkwatch.Span, each []linkwatch.Span) {
	after := readAll(ctx, w.fs, w.now)
	each = make([]linkwatch.Span, len(after))
	for i := range after {
		each[i] = linkwatch.Between(w.before[i], after[i])
	}
	return linkwatch.Combine(each), each
}
