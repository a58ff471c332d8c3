package storageagent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"github.com/hashicorp/memberlist"
	s3creds "github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sophon-dl/sophon/internal/membership"
	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
	"github.com/sophon-dl/sophon/storage-agent/dataset/s3src"
)

func TestNewRejects(t *testing.T) {
	data := testData(t)
	for _, tc := range []struct {
		name   string
		change func(*Config)
	}{
		{"no data", func(c *Config) { c.Data = "" }},
		{"missing data", func(c *Config) { c.Data = data + "/nope" }},
		{"negative cpus", func(c *Config) { c.CPUs = -1 }},
		{"negative queue", func(c *Config) { c.Queue = -1 }},
		{"negative timeout", func(c *Config) { c.RequestTimeout = -time.Second }},
		{"join without gossip", func(c *Config) { c.Gossip.Join = []string{"10.0.0.1:7946"} }},
		{"bad advertise", func(c *Config) { c.Advertise = "nohostport" }},
		{"bad gossip key", func(c *Config) { c.Gossip.Key = "short" }},
		{"half tls", func(c *Config) { c.TLS = tlsconf.Files{Cert: "x.pem"} }},
		{"neither tls nor insecure", func(c *Config) { c.Insecure = false }},
		{"gossip without a key", func(c *Config) { c.Insecure = false; c.TLS = pki(t).storage; c.Gossip.Bind = "127.0.0.1:0" }},
		{"both gossip key and key file", func(c *Config) { c.Gossip = membership.Gossip{Bind: "127.0.0.1:0", Key: testGossipKey, KeyFile: "k"} }},
		{"certificate of a compute agent", func(c *Config) { c.Insecure = false; c.TLS = pki(t).compute }},
		{"certificate of another cluster", func(c *Config) { c.Insecure = false; c.TLS = pki(t).storage; c.Cluster = "other" }},
		{"certificate of another node", func(c *Config) { c.Insecure = false; c.TLS = pki(t).storage; c.Name = "s9" }},
		{"negative replicas", func(c *Config) { c.Replicas = -1 }},
		{"too many replicas", func(c *Config) { c.Replicas = placement.MaxReplicas + 1 }},
		{"negative shard size", func(c *Config) { c.ShardSize = -1 }},
		{"negative send buffer", func(c *Config) { c.SendBuffer = -1 }},
		{"send buffer too large", func(c *Config) { c.SendBuffer = MaxSendBuffer + 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Data = data
			cfg.Insecure = true
			tc.change(&cfg)
			a, err := New(cfg)
			if err == nil {
				a.Close()
				t.Fatal("New succeeded, want an error")
			}
			if !errors.Is(err, ErrConfig) && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("New: got %v, want %v", err, ErrConfig)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	a, err := New(Config{Data: testData(t), CPUs: 2.5, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c := a.Config()
	if a.workers != 3 || c.Queue != DefaultQueue || c.RequestTimeout != 30*time.Second || c.Listen != InsecureListen || c.Name == "" || c.Version != "dev" {
		t.Errorf("defaults: workers %d, config %+v", a.workers, c)
	}
	// Without authentication the default listener is loopback only; with
	// it, every interface; a named address is kept either way.
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Insecure: true}, InsecureListen},
		{Config{Insecure: true, Listen: ":9999"}, ":9999"},
		{Config{}, DefaultListen},
	} {
		given := tc.cfg.Listen
		tc.cfg.fillDefaults()
		if tc.cfg.Listen != tc.want {
			t.Errorf("insecure %v, listen %q: got %q, want %q", tc.cfg.Insecure, given, tc.cfg.Listen, tc.want)
		}
	}
	b, err := New(Config{Data: testData(t), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Config().CPUs != float64(runtime.NumCPU()) {
		t.Errorf("cpus %v, want NumCPU", b.Config().CPUs)
	}
}

// TestLifecycle: Serve returns nil when ctx ends, an agent serves once,
// Close is safe twice and stops a running Serve.
func TestLifecycle(t *testing.T) {
	a, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() { serveErr = a.Serve(context.Background(), lis) })
	for a.Addr() == nil {
		time.Sleep(time.Millisecond)
	}
	lis2, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := a.Serve(context.Background(), lis2); !errors.Is(err, ErrServing) {
		t.Errorf("second Serve = %v, want ErrServing", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if serveErr != nil {
		t.Errorf("Serve = %v, want nil after Close", serveErr)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	lis3, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := a.Serve(context.Background(), lis3); !errors.Is(err, ErrAgentClosed) {
		t.Errorf("Serve after Close = %v, want ErrAgentClosed", err)
	}
}

// TestShutdownCutsOpenStreams: a stream left open past ShutdownGrace is
// cut, and Serve returns.
func TestShutdownCutsOpenStreams(t *testing.T) {
	cfg := testConfig(t)
	cfg.ShutdownGrace = 200 * time.Millisecond
	a := startAgent(t, cfg)
	stream, err := a.client.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&dataplanepb.FetchRequest{Sample: 1, PipelineId: preset(t, "imagenet-train").ID()}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v with a 200ms grace", d)
	}
	if _, err := stream.Recv(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("Recv after shutdown = %v, want a stream error", err)
	}
}

func TestMetrics(t *testing.T) {
	cfg := testConfig(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	a := startAgent(t, cfg)
	id := preset(t, "imagenet-train").ID()
	got := fetchAll(t, a.client, []*dataplanepb.FetchRequest{
		{Tag: 0, Sample: 0, Split: 5, PipelineId: id},
		{Tag: 1, Sample: 1, Split: 5, PipelineId: id},
		{Tag: 2, Sample: 2, Split: 0, PipelineId: id},
		{Tag: 3, Sample: badSample, Split: 1, PipelineId: id},
	})
	var bytes int
	for _, r := range got {
		bytes += len(r.Data)
	}
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		a.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	code, body := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`sophon_storage_samples_total{split="5"} 2`,
		`sophon_storage_samples_total{split="0"} 1`,
		`sophon_storage_errors_total{kind="not_jpeg"} 1`,
		"sophon_storage_bytes_sent_total " + strconv.FormatFloat(float64(bytes), 'g', -1, 64),
		"sophon_storage_queue_depth 0",
		"sophon_storage_streams_in_flight 0",
		"sophon_storage_cpu_seconds_total ",
		`sophon_peer_warnings_total{reason="fetch_stream_refused"} 0`,
		`sophon_peer_warnings_dropped_total{reason="bad_request"} 0`,
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	// The same over the configured listener.
	resp, err := http.Get("http://" + a.MetricsAddr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz over HTTP: %s", resp.Status)
	}
}

// TestMembership: an agent on a MockNetwork announces its role, gRPC
// address, cores, fingerprint and version to a peer.
func TestMembership(t *testing.T) {
	network := &memberlist.MockNetwork{}
	agentTr, peerTr := network.NewTransport("storage-1"), network.NewTransport("peer")
	ip, port, err := agentTr.FinalAdvertiseAddr("", 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Name = "storage-1"
	cfg.CPUs = 1.5
	cfg.Gossip.Bind = "mock"
	cfg.Advertise = "10.1.2.3:7070"
	cfg.Egress = 62_500_000
	a := startAgentWithKnobs(t, cfg, Knobs{GossipTransport: agentTr, GossipTune: membership.FastTiming})

	peer, err := membership.New(membership.Config{
		Name:      "peer",
		Join:      []string{net.JoinHostPort(ip.String(), strconv.Itoa(port))},
		Meta:      membership.Meta{Role: membership.RoleCompute, Version: "v-test"},
		Label:     "sophon", // the agent labels its gossip with its cluster even when insecure
		Insecure:  true,
		Transport: peerTr,
		Tune:      membership.FastTiming,
		Logger:    zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Stop the agent first (it leaves), then the peer; drain the stopped
	// transports so nothing blocks on MockNetwork's unbuffered channels.
	drain := make(chan struct{})
	var drains sync.WaitGroup
	t.Cleanup(func() {
		a.Close()
		peer.Close()
		close(drain)
		drains.Wait()
	})
	for _, tr := range []*memberlist.MockTransport{agentTr, peerTr} {
		drains.Go(func() {
			<-drain
			for {
				select {
				case <-tr.PacketCh():
				case c := <-tr.StreamCh():
					c.Close()
				case <-time.After(100 * time.Millisecond):
					return
				}
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms, err := peer.WaitFor(ctx, membership.RoleStorage, 1)
	if err != nil {
		t.Fatal(err)
	}
	shards := a.srv.hold.layout.Len()
	all := make([]int, shards)
	for i := range all {
		all[i] = i
	}
	want := membership.Meta{Role: membership.RoleStorage, GRPCAddr: "10.1.2.3:7070", Cores: 1.5, Fingerprint: a.Dataset().Fingerprint(), Version: "v-test",
		Replicas: 2, Shards: shards, Layout: a.srv.hold.digest, Held: placement.Digest(all), Egress: 62_500_000}
	if ms[0].Name != "storage-1" || ms[0].Meta != want {
		t.Errorf("peer sees %+v, want meta %+v", ms[0], want)
	}
}

func TestAdvertised(t *testing.T) {
	a := &Agent{cfg: Config{}}
	tcp := func(s string) net.Addr { ad, _ := net.ResolveTCPAddr("tcp", s); return ad }
	for _, tc := range []struct {
		lis, gossip, want string
	}{
		{"127.0.0.1:7070", "", "127.0.0.1:7070"},
		{"[::]:7070", "10.0.0.5:7946", "10.0.0.5:7070"},
		{"0.0.0.0:7070", "0.0.0.0:7946", ""}, // the hostname
	} {
		a.cfg.Gossip.Bind = tc.gossip
		got, err := a.advertised(tcp(tc.lis))
		if err != nil {
			t.Fatal(err)
		}
		if tc.want != "" && got != tc.want || tc.want == "" && strings.HasPrefix(got, "0.0.0.0") {
			t.Errorf("advertised(%s, gossip %q) = %s, want %s", tc.lis, tc.gossip, got, tc.want)
		}
	}
}

// testPKI holds the certificates of the TLS tests: a CA of cluster
// "sophon", storage agent "test-storage", compute agent "c1", and the
// rejected kinds.
type testPKI struct {
	storage, compute                                 tlsconf.Files
	wrongCA, expired, otherCluster, wrongRole, other tlsconf.Files
}

// testGossipKey is a valid gossip key.
const testGossipKey = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc="

func pki(t testing.TB) testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlsconf.NewCA(filepath.Join(dir, "ca"), "test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsconf.NewCA(filepath.Join(dir, "other"), "another CA")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	issue := func(ca *tlsconf.CA, l tlsconf.Leaf) tlsconf.Files {
		n++
		l.File = "leaf" + strconv.Itoa(n)
		l.Hosts = []string{"127.0.0.1", "localhost"}
		f, err := ca.Issue(dir, l)
		if err != nil {
			t.Fatal(err)
		}
		f.CA = filepath.Join(dir, "ca", tlsconf.CAFile)
		return f
	}
	compute := tlsconf.Identity{Cluster: "sophon", Role: tlsconf.RoleCompute, Name: "c1"}
	now := time.Now()
	return testPKI{
		storage:      issue(ca, tlsconf.Leaf{Identity: tlsconf.Identity{Cluster: "sophon", Role: tlsconf.RoleStorage, Name: "test-storage"}}),
		compute:      issue(ca, tlsconf.Leaf{Identity: compute}),
		wrongCA:      issue(other, tlsconf.Leaf{Identity: compute}),
		expired:      issue(ca, tlsconf.Leaf{Identity: compute, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)}),
		otherCluster: issue(ca, tlsconf.Leaf{Identity: tlsconf.Identity{Cluster: "other", Role: tlsconf.RoleCompute, Name: "c1"}}),
		wrongRole:    issue(ca, tlsconf.Leaf{Identity: tlsconf.Identity{Cluster: "sophon", Role: tlsconf.RoleStorage, Name: "s2"}}),
	}
}

// TestMutualTLS: a compute agent's certificate from the cluster's CA is
// served; plaintext, no certificate, another CA, an expired certificate, a
// certificate of another cluster or of the wrong role are refused, each
// logged at warn level with the peer's address.
func TestMutualTLS(t *testing.T) {
	p := pki(t)
	var logs testutil.SyncBuffer
	cfg := testConfig(t)
	cfg.Insecure = false
	cfg.Name = "" // from the certificate
	cfg.TLS = p.storage
	cfg.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel)
	// Every refusal below must be logged: a burst wide enough for them all
	// (TestPeerLogFlood tests the limit).
	a, err := NewWithKnobs(cfg, Knobs{PeerLog: peerlog.Options{Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Config().Name; got != "test-storage" {
		t.Errorf("Name: got %q, want the certificate's test-storage", got)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.Serve(ctx, lis) })
	defer func() { cancel(); wg.Wait(); a.Close() }()

	info := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = dataplanepb.NewStorageClient(conn).Info(ctx, &dataplanepb.InfoRequest{})
		return err
	}
	client := func(f tlsconf.Files) credentials.TransportCredentials {
		tc, err := f.Client(tlsconf.Expect{Cluster: "sophon", Role: tlsconf.RoleStorage, Name: "test-storage"})
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewTLS(tc)
	}
	if err := info(client(p.compute)); err != nil {
		t.Errorf("compute agent of the cluster: %v", err)
	}
	tc, err := p.compute.Client(tlsconf.Expect{Cluster: "sophon", Role: tlsconf.RoleStorage})
	if err != nil {
		t.Fatal(err)
	}
	tc.Certificates = nil
	tests := []struct {
		name   string
		creds  credentials.TransportCredentials
		reason string // in the server's warn line
	}{
		{"plaintext", insecure.NewCredentials(), "tls"},
		{"no client certificate", credentials.NewTLS(tc), "certificate"},
		// NB: a Go client sends no certificate the server's CA did not sign.
		{"another CA", client(p.wrongCA), "certificate"},
		{"expired", client(p.expired), "expired"},
		{"another cluster", client(p.otherCluster), "not a member"},
		{"wrong role", client(p.wrongRole), "wrong role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := info(tt.creds); err == nil {
				t.Fatal("served")
			}
			// The server may log after the client has failed.
			found := false
			for deadline := time.Now().Add(3 * time.Second); !found && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				for _, line := range strings.Split(logs.String(), "\n") {
					found = found || strings.Contains(line, `"level":"warn"`) && strings.Contains(line, `"peer":"127.0.0.1:`) &&
						strings.Contains(line, tt.reason)
				}
			}
			if !found {
				t.Errorf("no warn line with the peer and %q:\n%s", tt.reason, logs.String())
			}
		})
	}
}

// TestOpenStopsWithContext: an agent whose context ends while it opens
// its dataset (a signal during start-up) fails to open with
// dataset.ErrInterrupted, for a folder and for a bucket whose listing
// stalls.
func TestOpenStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Open(ctx, testConfig(t), Knobs{}); !errors.Is(err, dataset.ErrInterrupted) {
		t.Errorf("folder: Open with an ended context: %v, want dataset.ErrInterrupted", err)
	}

	s := newStallingS3(t, 3, datasettest.JPEG(t, 1))
	cfg := testConfig(t)
	cfg.Data, cfg.Index = "s3://bkt/p", "-"
	cfg.S3 = s3src.Config{Endpoint: s.srv.URL, Region: "us-east-1", Creds: s3creds.NewStaticV4("k", "s", "")}
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		<-s.stalled
		cancel()
	}()
	_, err := Open(ctx, cfg, Knobs{})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), `continuation token "t1"`) {
		t.Errorf("bucket: Open canceled while listing: %v, want context.Canceled naming the page", err)
	}
}
