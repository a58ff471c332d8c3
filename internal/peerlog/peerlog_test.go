package peerlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// lines decodes the JSON lines in buf.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func newTest(burst int, every time.Duration) (*Limiter, *fakeClock, *bytes.Buffer, zerolog.Logger) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	var buf bytes.Buffer
	return New(Options{Burst: burst, Every: every, Now: clk.now}), clk, &buf, zerolog.New(&buf)
}

func TestBurstThenRate(t *testing.T) {
	l, clk, buf, log := newTest(10, 10*time.Second)
	for i := range 1000 {
		l.Warn(log, FetchStreamRefused).Int("i", i).Msg("refused")
	}
	got := lines(t, buf)
	if len(got) != 10 {
		t.Fatalf("got %d lines for 1000 events at once, want the burst of 10", len(got))
	}
	for i, m := range got {
		if m["i"] != float64(i) || m["peer_event"] != FetchStreamRefused || m["dropped"] != nil || m["level"] != "warn" {
			t.Errorf("line %d: got %v, want i=%d, peer_event, level warn, no dropped", i, m, i)
		}
	}
	buf.Reset()
	clk.advance(9 * time.Second)
	l.Warn(log, FetchStreamRefused).Msg("refused")
	if n := len(lines(t, buf)); n != 0 {
		t.Fatalf("got %d lines 9 s after the burst, want 0", n)
	}
	clk.advance(time.Second)
	l.Warn(log, FetchStreamRefused).Msg("refused")
	l.Warn(log, FetchStreamRefused).Msg("refused")
	got = lines(t, buf)
	if len(got) != 1 || got[0]["dropped"] != float64(991) {
		t.Fatalf("got %v 10 s after the burst, want one line with dropped=991 (990 + 1)", got)
	}
	if v := value(t, l.total, FetchStreamRefused); v != 1003 {
		t.Errorf("total: got %v, want 1003", v)
	}
	if v := value(t, l.dropped, FetchStreamRefused); v != 992 {
		t.Errorf("dropped: got %v, want 992", v)
	}
}

func TestReasonsAreIndependent(t *testing.T) {
	l, _, buf, log := newTest(2, time.Minute)
	for range 5 {
		l.Warn(log, TLSHandshakeRejected).Msg("tls")
		l.Warn(log, GossipRejected).Msg("gossip")
	}
	n := map[any]int{}
	for _, m := range lines(t, buf) {
		n[m["peer_event"]]++
	}
	if n[TLSHandshakeRejected] != 2 || n[GossipRejected] != 2 {
		t.Fatalf("got %v lines by reason, want 2 each", n)
	}
}

func TestRefillsWhenQuiet(t *testing.T) {
	l, clk, buf, log := newTest(3, time.Second)
	for range 3 {
		l.Warn(log, BadRequest).Msg("x")
	}
	clk.advance(time.Hour)
	for range 5 {
		l.Warn(log, BadRequest).Msg("x")
	}
	if n := len(lines(t, buf)); n != 6 {
		t.Fatalf("got %d lines, want a full burst of 3 again after a quiet hour (6)", n)
	}
}

// TestSteadyRate: past the burst, events every second for a minute give
// a line every Every.
func TestSteadyRate(t *testing.T) {
	l, clk, buf, log := newTest(1, 10*time.Second)
	for range 60 {
		l.Warn(log, BadRequest).Msg("x")
		clk.advance(time.Second)
	}
	got := lines(t, buf)
	if len(got) != 6 {
		t.Fatalf("got %d lines in 60 s at one event a second, want 6", len(got))
	}
	for _, m := range got[1:] {
		if m["dropped"] != float64(9) {
			t.Errorf("got dropped=%v, want 9", m["dropped"])
		}
	}
}

func TestConcurrent(t *testing.T) {
	l, _, buf, log := newTest(10, time.Hour)
	var mu sync.Mutex
	safe := log.Output(zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				l.Warn(safe, TrainerRefused).Msg("x")
			}
		})
	}
	wg.Wait()
	if n := len(lines(t, buf)); n != 10 {
		t.Errorf("got %d lines, want 10", n)
	}
	if v := value(t, l.total, TrainerRefused); v != 4000 {
		t.Errorf("total: got %v, want 4000", v)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestNilLimiterLogsEverything(t *testing.T) {
	var l *Limiter
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	for range 50 {
		l.Warn(log, BadRequest).Msg("x")
	}
	if n := len(lines(t, &buf)); n != 50 {
		t.Fatalf("got %d lines, want 50", n)
	}
}

func TestStdLogger(t *testing.T) {
	l, _, buf, log := newTest(2, time.Hour)
	sl := StdLogger(l, log, MetricsHTTPError)
	for range 5 {
		sl.Printf("http: Accept error: too many open files; retrying")
	}
	got := lines(t, buf)
	if len(got) != 2 || got[0]["message"] != "http: Accept error: too many open files; retrying" || got[0]["peer_event"] != MetricsHTTPError {
		t.Fatalf("got %v, want 2 lines of the message with peer_event %s", got, MetricsHTTPError)
	}
}

func TestSeriesAtZero(t *testing.T) {
	l := New(Options{})
	ch := make(chan prometheus.Metric, 100)
	l.total.Collect(ch)
	close(ch)
	if n := len(ch); n != len(Reasons) {
		t.Errorf("got %d series, want one per reason (%d)", n, len(Reasons))
	}
}

func TestWarnAllocs(t *testing.T) {
	l := New(Options{Burst: 1, Every: time.Hour})
	log := zerolog.Nop()
	l.Warn(log, BadRequest).Msg("x")
	if n := testing.AllocsPerRun(100, func() { l.Warn(log, BadRequest).Str("peer", "p").Msg("x") }); n != 0 {
		t.Errorf("a dropped line allocates %v times, want 0", n)
	}
	l.WarnPeer(log, BadRequest, "10.0.0.1:5000").Msg("x")
	if n := testing.AllocsPerRun(100, func() { l.WarnPeer(log, BadRequest, "10.0.0.1:5001").Msg("x") }); n != 0 {
		t.Errorf("a known peer's dropped line allocates %v times, want 0", n)
	}
}

// value is the counter of vec labelled reason.
func value(t *testing.T, vec *prometheus.CounterVec, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := vec.WithLabelValues(reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestPeersAreIndependent: one peer flooding a reason spends its own burst:
// another peer's first lines of that reason are still logged, and the
// flooder's ports do not buy it new bursts.
func TestPeersAreIndependent(t *testing.T) {
	l, _, buf, log := newTest(3, time.Hour)
	for i := range 1000 {
		p := fmt.Sprintf("10.0.0.1:%d", 1000+i) // a new port each time
		l.WarnPeer(log, BadRequest, p).Str("peer", p).Msg("x")
	}
	l.WarnPeer(log, BadRequest, "10.0.0.2:5000").Str("peer", "10.0.0.2:5000").Msg("x")
	l.WarnPeer(log, BadRequest, "10.0.0.2:5001").Str("peer", "10.0.0.2:5001").Msg("x")
	n := map[string]int{}
	for _, m := range lines(t, buf) {
		n[strings.Split(m["peer"].(string), ":")[0]]++
	}
	if n["10.0.0.1"] != 3 || n["10.0.0.2"] != 2 {
		t.Fatalf("got %v lines by peer host, want the flooder's burst of 3 and both of the other's 2", n)
	}
	if v := value(t, l.dropped, BadRequest); v != 997 {
		t.Errorf("dropped: got %v, want 997", v)
	}
}

// TestPeersBounded: 50,000 peers leave at most MaxPeers tracked, and the
// reason's total bucket bounds their lines to PeerShare bursts however many
// they are; a peer forgotten and back gets its burst again.
func TestPeersBounded(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	var lines int
	log := zerolog.New(writerFunc(func(p []byte) (int, error) { lines++; return len(p), nil }))
	l := New(Options{Burst: 2, Every: time.Hour, MaxPeers: 100, Now: clk.now})
	for i := range 50_000 {
		l.WarnPeer(log, GossipRejected, fmt.Sprintf("10.%d.%d.%d:7946", i>>16&255, i>>8&255, i&255)).Msg("x")
		if n := l.trackedPeers(); n > 100 {
			t.Fatalf("after %d peers: %d tracked, want at most 100", i+1, n)
		}
	}
	if want := PeerShare * 2; lines != want {
		t.Errorf("50,000 peers logged %d lines, want the reason's total burst of %d", lines, want)
	}
	if v := value(t, l.total, GossipRejected); v != 50_000 {
		t.Errorf("total: got %v, want 50000", v)
	}
}

func TestHostOf(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:5000": "10.0.0.1", "[::1]:80": "::1", "host.example:7946": "host.example",
		"10.0.0.1": "10.0.0.1", "::1": "::1", "fe80::1:80": "fe80::1:80", "storage-1": "storage-1",
		"": "", "a:": "a:", "a:b": "a:b", "unknown": "unknown",
	} {
		if got := hostOf(in); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", in, got, want)
		}
	}
}
