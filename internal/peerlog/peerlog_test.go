package peerlog

import (
	"bytes"
	"encoding/json"
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
