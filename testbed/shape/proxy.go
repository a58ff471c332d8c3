package shape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// minBurst is the smallest default bucket, as in the netns tbf set-up: one
// maximal GSO packet (a 65,535-byte IP packet plus its link header) fits, so
// tbf never has to split one into MTU-sized segments in software. The
// segments' headers are charged either way (the kernel counts them into a
// GSO packet's length): TCP's payload gets 1448/1514 of a veth's rate
// (netns.PayloadFraction).
const minBurst = 65 << 10

// DefaultBurst is the bucket size used for a rate of bitsPerSec when none
// is given: the bytes the rate sends in 4 ms, and at least 64 KiB (the
// same rule as the testbed's tc tbf).
func DefaultBurst(bitsPerSec float64) int {
	return max(int(bitsPerSec/8*0.004), minBurst)
}

// Proxy is a TCP proxy that plays a shaped link: every connection accepted
// on its listener is forwarded to Target, and the bytes of each direction
// spend one token bucket shared by all connections, so the aggregate of
// each direction is bounded by Rate, as on a real link (a single
// connection gets the whole rate). Set the fields, then call Serve or
// ServeListener once.
type Proxy struct {
	// Listen is the address Serve listens on, e.g. "127.0.0.1:0".
	Listen string
	// Target is the address connections are forwarded to.
	Target string
	// Rate is each direction's rate. The zero Rate means unshaped.
	Rate Rate
	// Burst is each bucket's size in bytes. Zero means DefaultBurst(rate).
	Burst int
	// Dial opens the connection to Target. Nil means a net.Dialer (TCP).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	up, down   atomic.Int64 // bytes forwarded client->target, target->client
	conns      atomic.Int64 // connections accepted
	mu         sync.Mutex
	addr       net.Addr
	started    bool
	upB, downB *Bucket
}

// Addr is the listener's address once serving, else nil.
func (p *Proxy) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Stats are a proxy's byte counters.
type Stats struct {
	// Up counts bytes forwarded from clients to Target, Down from Target to
	// clients; Conns the connections accepted.
	Up, Down, Conns int64
}

// Stats returns the bytes forwarded so far.
func (p *Proxy) Stats() Stats {
	return Stats{Up: p.up.Load(), Down: p.down.Load(), Conns: p.conns.Load()}
}

// Serve listens on Listen and serves until ctx ends (see ServeListener).
func (p *Proxy) Serve(ctx context.Context) error {
	lis, err := net.Listen("tcp", p.Listen)
	if err != nil {
		return fmt.Errorf("shape: proxy listen: %w", err)
	}
	return p.ServeListener(ctx, lis)
}

// ServeListener forwards the connections accepted on lis until ctx ends,
// then closes lis and every open connection, waits for its goroutines and
// returns nil. It returns an error when the configuration is bad, accepting
// fails, or the proxy already served.
func (p *Proxy) ServeListener(ctx context.Context, lis net.Listener) error {
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		lis.Close()
		return errors.New("shape: proxy already served")
	}
	p.started = true
	p.mu.Unlock()
	if !p.Rate.IsZero() {
		burst := p.Burst
		if burst <= 0 {
			burst = DefaultBurst(p.Rate.Bits())
		}
		p.upB, p.downB = NewBucket(p.Rate.BytesPerSec(), burst), NewBucket(p.Rate.BytesPerSec(), burst)
	}
	dial := p.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	p.mu.Lock()
	p.addr = lis.Addr()
	p.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		<-ctx.Done()
		lis.Close()
	})
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			cancel()
			return fmt.Errorf("shape: proxy accept: %w", err)
		}
		p.conns.Add(1)
		wg.Go(func() { p.forward(ctx, c, dial) })
	}
}

// forward relays one client connection to Target until both directions
// end or ctx ends.
func (p *Proxy) forward(ctx context.Context, client net.Conn, dial func(context.Context, string, string) (net.Conn, error)) {
	defer client.Close()
	target, err := dial(ctx, "tcp", p.Target)
	if err != nil {
		return
	}
	defer target.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		client.Close()
		target.Close()
	})
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { relay(ctx, target, client, p.upB, &p.up) })
	relay(ctx, client, target, p.downB, &p.down)
	wg.Wait()
}

// relay copies src to dst, paying b (nil: unshaped) for each chunk before
// writing it, and counting what it wrote. At src's end it half-closes dst,
// so the other direction can finish; on an error it closes both.
func relay(ctx context.Context, dst, src net.Conn, b *Bucket, count *atomic.Int64) {
	buf := make([]byte, maxChunk)
	n := len(buf)
	if b != nil {
		n = chunk(b)
	}
	for {
		m, rerr := src.Read(buf[:n])
		if m > 0 {
			if b != nil && b.Wait(ctx, m) != nil {
				dst.Close()
				src.Close()
				return
			}
			w, werr := dst.Write(buf[:m])
			count.Add(int64(w))
			if werr != nil {
				dst.Close()
				src.Close()
				return
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
					return
				}
			}
			dst.Close()
			src.Close()
			return
		}
	}
}
