package computeagent

import (
	"context"
	"errors"
	"maps"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// The tests in this file inject faults: a storage agent restarted, Info
// failing, a replica stopped (SIGSTOP-like), an epoch that fails.

// sampleSHAs maps each sample of epoch e to its tensor's hash, failing on a
// sample delivered twice.
func sampleSHAs(t *testing.T, rec *recorder, e uint64) map[uint64][32]byte {
	t.Helper()
	m := map[uint64][32]byte{}
	for _, d := range rec.epoch(e) {
		if _, dup := m[d.sample]; dup {
			t.Fatalf("epoch %d: sample %d delivered twice", e, d.sample)
		}
		m[d.sample] = d.sha
	}
	return m
}

// slowConsumer takes each batch after d, and calls after with the number
// of batches consumed so far.
func slowConsumer(d time.Duration, after func(n int)) Consumer {
	var n atomic.Int64
	return consumerFunc(func(ctx context.Context, b *Batch) error {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
		if after != nil {
			after(int(n.Add(1)))
		}
		return nil
	})
}

// TestStorageRestart: the only storage agent (the real one, on loopback
// TCP) goes away mid-epoch for 3 s and comes back on the same address; the
// epoch completes, every sample once, with the same tensors as a clean run.
func TestStorageRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a 3 s outage")
	}
	dir := writeImageFolder(t, -1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	scfg := storageagent.Config{Data: dir, Name: "st", CPUs: 1, ShutdownGrace: 50 * time.Millisecond, Insecure: true}
	serve := func(lis net.Listener) (stop func()) {
		a, err := storageagent.New(scfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := a.Serve(ctx, lis); err != nil {
				t.Errorf("storage agent: %v", err)
			}
		})
		var once sync.Once
		stop = func() {
			once.Do(func() {
				cancel()
				if err := a.Close(); err != nil {
					t.Errorf("storage agent close: %v", err)
				}
				wg.Wait()
			})
		}
		t.Cleanup(stop)
		return stop
	}

	// The clean run.
	stop := serve(lis)
	cfg, clean := testConfig(t, nil, addr)
	if _, err := runAgent(t, cfg); err != nil {
		t.Fatal(err)
	}
	want := sampleSHAs(t, clean, 0)

	// The faulty one: the storage agent stops after 2 batches.
	restarted := make(chan struct{})
	cfg, rec := testConfig(t, nil, addr)
	cfg.Consumer = slowConsumer(20*time.Millisecond, func(n int) {
		if n != 2 {
			return
		}
		stop()
		go func() {
			defer close(restarted)
			time.Sleep(3 * time.Second)
			lis, err := net.Listen("tcp", addr)
			if err != nil {
				t.Errorf("relisten: %v", err)
				return
			}
			serve(lis)
		}()
	})
	reports, err := runAgent(t, cfg)
	<-restarted
	if err != nil {
		t.Fatal(err)
	}
	r := reports[0]
	checkReport(t, r)
	checkOnce(t, rec.epoch(0), allSamples())
	if got := sampleSHAs(t, rec, 0); !maps.Equal(got, want) {
		t.Error("tensors differ from the clean run's")
	}
	if r.Seconds < 2.5 || r.StreamFailures < 1 {
		t.Errorf("epoch took %.1f s with %d stream failures: want the 3 s outage ridden out", r.Seconds, r.StreamFailures)
	}
	t.Logf("restart: %.2f s, %d stream failures, %d retried", r.Seconds, r.StreamFailures, r.Retried)
}

// TestInfoRetried: Info fails for the first 2 s of the epoch; it is
// retried and the epoch runs.
func TestInfoRetried(t *testing.T) {
	n := &enginetest.MemNet{}
	s := enginetest.NewStorage(t, "s1")
	until := time.Now().Add(2 * time.Second)
	var calls atomic.Int64
	s.InfoErr = func() error {
		calls.Add(1)
		if time.Now().Before(until) {
			return status.Error(codes.Unavailable, "fake: starting up")
		}
		return nil
	}
	n.Serve(t, "s1:1", s)
	cfg, rec := testConfig(t, n, "s1:1")
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, reports[0])
	checkOnce(t, rec.epoch(0), allSamples())
	if calls.Load() < 3 {
		t.Errorf("Info called %d times, want retries", calls.Load())
	}
	// The wait counts in the epoch's report: the epoch began before the
	// first Info call, which failed, so before until; its first request
	// followed the first answer, after until.
	r := reports[0]
	began := r.StartUnixNS - int64(r.StartWaitSeconds*1e9)
	if r.StartUnixNS < until.UnixNano() || began >= until.UnixNano() {
		t.Errorf("start wait %.3f s, first request %v: want the epoch begun before %v and its first request after",
			r.StartWaitSeconds, time.Unix(0, r.StartUnixNS), until)
	}

	// With a budget shorter than the outage the run fails, and says why.
	until = time.Now().Add(time.Hour)
	cfg, _ = testConfig(t, n, "s1:1")
	cfg.RetryBudget = 300 * time.Millisecond
	if _, err := runAgent(t, cfg); !errors.Is(err, ErrNoStorage) {
		t.Fatalf("got %v, want ErrNoStorage", err)
	}
}

// gate stops a connection the way SIGSTOP stops its process: while
// paused, nothing is read or written.
type gate struct {
	mu     sync.Mutex
	paused bool
	sig    chan struct{} // closed on resume
}

func (g *gate) pause() {
	g.mu.Lock()
	if !g.paused {
		g.paused, g.sig = true, make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	if g.paused {
		g.paused = false
		close(g.sig)
	}
	g.mu.Unlock()
}

func (g *gate) wait() {
	g.mu.Lock()
	paused, sig := g.paused, g.sig
	g.mu.Unlock()
	if paused {
		<-sig
	}
}

type gatedListener struct {
	net.Listener
	g *gate
}

func (l gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return gatedConn{c, l.g}, nil
}

type gatedConn struct {
	net.Conn
	g *gate
}

func (c gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.g.wait()
	return n, err
}

func (c gatedConn) Write(p []byte) (int, error) {
	c.g.wait()
	return c.Conn.Write(p)
}

// TestStalledReplica: one of two replicas stops answering mid-epoch (its
// connection frozen, as by SIGSTOP, for longer than the epoch) with its
// window of requests outstanding. The default adaptive stall timeout
// hedges them to the healthy replica: the epoch delivers every sample
// once, with the clean run's tensors, within 2x the clean epoch's time.
func TestStalledReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("times two epochs of a few seconds")
	}
	const step = 300 * time.Millisecond // per batch of 8: a GPU-bound epoch of about 2.4 s
	run := func(stall bool) (report.EpochReport, map[uint64][32]byte) {
		n := &enginetest.MemNet{}
		g := &gate{}
		n.Serve(t, "a:1", enginetest.NewStorage(t, "a"))
		n.ServeOn(t, "b:1", enginetest.NewStorage(t, "b"), bufconn.Listen(1<<20), func(l net.Listener) net.Listener { return gatedListener{l, g} })
		t.Cleanup(g.resume) // runs before the servers stop
		cfg, rec := testConfig(t, n, "a:1", "b:1")
		cfg.Consumer = slowConsumer(step, func(n int) {
			if stall && n == 1 {
				g.pause()
			}
		})
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkReport(t, reports[0])
		checkOnce(t, rec.epoch(0), allSamples())
		return reports[0], sampleSHAs(t, rec, 0)
	}
	clean, want := run(false)
	stalled, got := run(true)
	if !maps.Equal(got, want) {
		t.Error("tensors differ from the clean run's")
	}
	t.Logf("clean %.2f s; one replica stalled %.2f s (%.2fx), %d stalls, %d hedged, %d duplicates",
		clean.Seconds, stalled.Seconds, stalled.Seconds/clean.Seconds, stalled.Stalls, stalled.Hedged, stalled.Duplicates)
	if stalled.Seconds > 2*clean.Seconds {
		t.Errorf("stalled epoch %.2f s, more than 2x the clean %.2f s", stalled.Seconds, clean.Seconds)
	}
	if stalled.Stalls < 1 || stalled.Hedged < 1 {
		t.Errorf("%d stalls, %d hedged: want the stalled stream detected and hedged", stalled.Stalls, stalled.Hedged)
	}
}

// TestFailedEpochReported: an epoch that fails still writes its report
// line, with status failed and the error.
func TestFailedEpochReported(t *testing.T) {
	n := &enginetest.MemNet{}
	bad := enginetest.NewStorage(t, "bad")
	bad.FailAlways = true
	n.Serve(t, "bad:1", bad)
	cfg, _ := testConfig(t, n, "bad:1")
	cfg.RetryBudget = 200 * time.Millisecond
	cfg.ReportPath = filepath.Join(t.TempDir(), "report.jsonl")
	if _, err := runAgent(t, cfg); !errors.Is(err, ErrNoStorage) {
		t.Fatalf("got %v, want ErrNoStorage", err)
	}
	rs, err := report.ReadReport(cfg.ReportPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Status != "failed" || rs[0].Error == "" || rs[0].StreamFailures < 1 {
		t.Fatalf("reports %+v, want one failed epoch with its error", rs)
	}
}
