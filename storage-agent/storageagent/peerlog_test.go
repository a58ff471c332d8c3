package storageagent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// frozenClock is a clock that moves only when the test says.
type frozenClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *frozenClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *frozenClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestPeerLogFlood: 3,000 plaintext connections that fail the TLS
// handshake and 1,000 Fetch streams past the per-peer limit write a burst
// of lines per reason, not one per event, while the counters on /metrics
// hold every event; the next line after the interval says how many were
// dropped.
func TestPeerLogFlood(t *testing.T) {
	const (
		handshakes = 3000
		refusals   = 1000
		burst      = peerlog.DefaultBurst
		every      = peerlog.DefaultEvery
	)
	p := pki(t)
	var logs testutil.SyncBuffer
	cfg := testConfig(t)
	cfg.Insecure = false
	cfg.Name = ""
	cfg.TLS = p.storage
	cfg.MaxStreamsPerPeer = 1
	cfg.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel)
	clk := &frozenClock{t: time.Unix(1_000_000, 0)}
	a, err := NewWithKnobs(cfg, Knobs{PeerLog: peerlog.Options{Burst: burst, Every: every, Now: clk.now}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.Serve(ctx, lis) })
	defer func() { cancel(); wg.Wait(); a.Close() }()

	// Plaintext clients: each sends an HTTP/2 preface in the clear and
	// hangs up, failing the server's handshake.
	var flood sync.WaitGroup
	next := make(chan struct{})
	go func() {
		defer close(next)
		for range handshakes {
			next <- struct{}{}
		}
	}()
	for range 8 {
		flood.Go(func() {
			for range next {
				c, err := net.Dial("tcp", lis.Addr().String())
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
				c.Close()
			}
		})
	}
	flood.Wait()

	client := storageClient(t, p, lis.Addr().String())
	held := holdStream(t, ctx, client)
	defer held()
	for range refusals {
		refuse(t, ctx, client)
	}

	scrape := func() (tls, refused, dropped float64) {
		m := scrapeMetrics(t, a)
		return m[`sophon_peer_warnings_total{reason="tls_handshake_rejected"}`],
			m[`sophon_peer_warnings_total{reason="fetch_stream_refused"}`],
			m[`sophon_peer_warnings_dropped_total{reason="fetch_stream_refused"}`]
	}
	// The server may count a handshake after its client has hung up.
	tls, refused, dropped := scrape()
	for deadline := time.Now().Add(30 * time.Second); tls < handshakes && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		tls, refused, dropped = scrape()
	}
	if tls < handshakes {
		t.Errorf("sophon_peer_warnings_total{reason=tls_handshake_rejected}: got %v, want at least %d", tls, handshakes)
	}
	if refused != refusals || dropped != refusals-burst {
		t.Errorf("fetch_stream_refused: got %v counted, %v dropped; want %d, %d", refused, dropped, refusals, refusals-burst)
	}
	lines := countLines(t, logs.String())
	t.Logf("counted %v handshakes, %v refusals (%v dropped); lines %v", tls, refused, dropped, lines)
	for _, msg := range []string{"tls handshake rejected", "fetch stream refused"} {
		if n := lines[msg]; n >= 100 || n != burst {
			t.Errorf("%q: %d lines, want the burst of %d (under 100)", msg, n, burst)
		}
	}

	// Past the interval, one more refusal is logged with the count of the
	// lines dropped since the last.
	clk.advance(every)
	refuse(t, ctx, client)
	re := regexp.MustCompile(`"dropped":(\d+)[^\n]*"message":"fetch stream refused"`)
	m := re.FindStringSubmatch(logs.String())
	if m == nil || m[1] != strconv.Itoa(refusals-burst) {
		t.Errorf("the line after the interval: got %v, want dropped=%d", m, refusals-burst)
	}
}

// storageClient dials addr with the compute agent's certificate of p.
func storageClient(t *testing.T, p testPKI, addr string) dataplanepb.StorageClient {
	t.Helper()
	tc, err := p.compute.Client(tlsconf.Expect{Cluster: "sophon", Role: tlsconf.RoleStorage, Name: "test-storage"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(tlsconf.Credentials(tc, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return dataplanepb.NewStorageClient(conn)
}

// holdStream opens a Fetch stream and waits for its first response, so
// that the peer holds its one stream; the returned func closes it.
func holdStream(t *testing.T, ctx context.Context, c dataplanepb.StorageClient) func() {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	s, err := c.Fetch(sctx, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&dataplanepb.FetchRequest{Sample: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	return cancel
}

// refuse opens a Fetch stream that the per-peer limit refuses.
func refuse(t *testing.T, ctx context.Context, c dataplanepb.StorageClient) {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.Fetch(sctx)
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a stream past the per-peer limit: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// scrapeMetrics reads the agent's /metrics into series -> value.
func scrapeMetrics(t *testing.T, a *Agent) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	a.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	out := map[string]float64{}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// countLines counts the JSON log lines in logs by message.
func countLines(t *testing.T, logs string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m struct{ Message string }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		n[m.Message]++
	}
	return n
}
