package computeagent

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// countingListener records each accepted connection's remote address (the
// compute agent's local port) and the bytes the server wrote on it.
type countingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]*atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := &atomic.Int64{}
	l.mu.Lock()
	l.conns[c.RemoteAddr().String()] = n
	l.mu.Unlock()
	return &countingConn{Conn: c, n: n}, nil
}

// written is the bytes written on each connection, by remote address.
func (l *countingListener) written() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int64{}
	for a, n := range l.conns {
		out[a] = n.Load()
	}
	return out
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// TestConnsStriped: with Config.Conns N the compute agent reaches the real
// storage agent over loopback TCP on N connections of its own (N local
// ports), each carrying samples, kept across epochs, and every epoch
// delivers each sample exactly once, with the tensors of a run on one
// connection. The storage agent counts the N connections as one client.
func TestConnsStriped(t *testing.T) {
	dir := writeImageFolder(t, -1)
	var ref map[uint64][32]byte
	for _, conns := range []int{1, 3} {
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis := &countingListener{Listener: raw, conns: map[string]*atomic.Int64{}}
		startStorage(t, storageagent.Config{Data: dir, Name: "st1", CPUs: 1, AllowClientSpecs: true, Insecure: true,
			MaxStreamsPerPeer: conns}, storageagent.Knobs{}, lis)
		cfg, rec := testConfig(t, nil, raw.Addr().String())
		cfg.Conns = conns
		cfg.Window = 6
		cfg.Epochs = 2
		cfg.Plan = planner.AllOff(cfg.Pipeline)
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatalf("%d conns: %v", conns, err)
		}
		for e := range uint64(2) {
			checkReport(t, reports[e])
			checkOnce(t, rec.epoch(e), allSamples())
			if bs := reports[e].ByStorage; len(bs) != 1 || bs[0].Conns != conns {
				t.Errorf("%d conns, epoch %d: by_storage %+v, want conns %d", conns, e, bs, conns)
			}
		}
		shas := sampleSHAs(t, rec, 0)
		if ref == nil {
			ref = shas
		} else {
			for s, h := range ref {
				if shas[s] != h {
					t.Errorf("%d conns: sample %d differs from the run on one connection", conns, s)
				}
			}
		}
		got := lis.written()
		if len(got) != conns {
			t.Errorf("%d conns: the storage agent accepted %d connections (%v), want %d", conns, len(got), got, conns)
		}
		for addr, n := range got {
			// Each carried responses: more than a few frames of
			// HTTP/2 settings and pings.
			if n < 4<<10 {
				t.Errorf("%d conns: connection from %s carried %d bytes, want samples", conns, addr, n)
			}
		}
		t.Logf("%d conns: bytes by connection %v", conns, got)
	}
}

// TestConnsFaults: an epoch striped over several connections keeps its
// guarantees under faults. Streams failing mid-epoch requeue only their
// own requests: every sample once. A storage agent that dies is given up
// once, whatever its stripes: its samples come from the other replica
// (R=2), or are reported unavailable once each (R=1, skip).
func TestConnsFaults(t *testing.T) {
	t.Run("streams fail", func(t *testing.T) {
		n := &enginetest.MemNet{}
		s := enginetest.NewStorage(t, "s1")
		s.FailAt = map[int64]bool{10: true, 30: true, 31: true, 50: true}
		n.Serve(t, "s1:1", s)
		cfg, rec := testConfig(t, n, "s1:1")
		cfg.Conns = 4
		cfg.Plan = planner.AllOff(cfg.Pipeline)
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkOnce(t, rec.epoch(0), allSamples())
		checkReport(t, reports[0])
		if reports[0].StreamFailures < 2 {
			t.Errorf("stream failures %d: want the injected failures counted", reports[0].StreamFailures)
		}
	})
	for _, replicas := range []int{1, 2} {
		n := &enginetest.MemNet{}
		a, b := enginetest.NewStorage(t, "a"), enginetest.NewStorage(t, "b")
		a.Layout, b.Layout = twoShards(), twoShards()
		a.Held, b.Held = []uint32{0, 1}, []uint32{0, 1}
		if replicas == 1 {
			a.Held, b.Held = []uint32{0}, []uint32{1}
		}
		b.DieAt = 5
		n.Serve(t, "a:1", a)
		n.Serve(t, "b:1", b)
		cfg, rec := testConfig(t, n, "a:1", "b:1")
		cfg.Conns = 3
		cfg.OnError = OnErrorSkip
		cfg.RetryBudget = 300 * time.Millisecond
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatalf("R=%d: %v", replicas, err)
		}
		r := reports[0]
		seen := map[uint64]int{}
		for _, d := range rec.epoch(0) {
			seen[d.sample]++
		}
		for _, f := range r.Failed {
			if replicas == 2 || f.Kind != report.KindUnavailable || f.Sample < 32 {
				t.Errorf("R=%d: failure %+v", replicas, f)
			}
			seen[f.Sample]++
		}
		for _, s := range allSamples() {
			if seen[s] != 1 {
				t.Errorf("R=%d: sample %d delivered or reported %d times, want once", replicas, s, seen[s])
			}
		}
		if replicas == 1 && len(r.Failed) == 0 {
			t.Errorf("R=1: nothing reported unavailable after b died")
		}
	}
}

// TestStripesDialEarly: the connections an epoch stripes over are dialled
// when the agent finds its storage agents (before stage 1, for the first
// epoch), not at their first request, so that a long round trip's TCP and
// TLS handshakes are not the first epoch's: with three connections and no
// request sent on the two stripes, the storage agent accepts three.
func TestStripesDialEarly(t *testing.T) {
	dir := writeImageFolder(t, -1)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &countingListener{Listener: raw, conns: map[string]*atomic.Int64{}}
	startStorage(t, storageagent.Config{Data: dir, Name: "st1", CPUs: 1, AllowClientSpecs: true, Insecure: true,
		MaxStreamsPerPeer: 3}, storageagent.Knobs{}, lis)
	cfg, _ := testConfig(t, nil, raw.Addr().String())
	cfg.Conns = 3
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs, _, err := a.storage(ctx, a.epochConns(engine.Opts{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Conns() != 3 {
		t.Fatalf("fetchers %d, conns %d; want one fetcher on 3 connections", len(fs), fs[0].Conns())
	}
	for len(lis.written()) < 3 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if got := lis.written(); len(got) != 3 {
		t.Errorf("the storage agent accepted %d connections before any request on the stripes, want 3", len(got))
	}
}
