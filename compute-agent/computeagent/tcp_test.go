package computeagent

import (
	"context"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// recordingListener keeps every connection it accepts.
type recordingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// otherCongestion is a congestion control the kernel offers that is not
// the host's default, so that reading it back shows it was set.
func otherCongestion(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("TCP_CONGESTION is Linux's, not %s's", runtime.GOOS)
	}
	avail, err := tcpinfo.Available()
	if err != nil {
		t.Skipf("no list of congestion controls: %v", err)
	}
	def, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	for _, name := range avail {
		if name+"\n" != string(def) {
			return name
		}
	}
	t.Skipf("the kernel offers one congestion control only (%v)", avail)
	return ""
}

// TestTCPCongestionBothEnds: with --tcp-congestion on both agents, the
// compute agent's socket to the storage agent and the storage agent's
// accepted socket both run the chosen algorithm while an epoch runs, and
// the epoch's report carries the round trip read from TCP_INFO.
func TestTCPCongestionBothEnds(t *testing.T) {
	cc := otherCongestion(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &recordingListener{Listener: inner}
	startStorage(t, storageagent.Config{Data: writeImageFolder(t, -1), Name: "st", CPUs: 1, AllowClientSpecs: true, Insecure: true, TCPCongestion: cc},
		storageagent.Knobs{}, lis)
	cfg, rec := testConfig(t, nil, inner.Addr().String())
	cfg.Plan = planner.NoOff()
	cfg.TCPCongestion = cc
	var mu sync.Mutex
	var dialled []net.Conn
	cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			mu.Lock()
			dialled = append(dialled, c)
			mu.Unlock()
		}
		return c, err
	}
	var once sync.Once
	var got []string
	on := cfg.OnSample
	cfg.OnSample = func(epoch, sample uint64, sha [32]byte) {
		once.Do(func() {
			mu.Lock()
			lis.mu.Lock()
			for _, c := range append(slices.Clone(dialled), lis.conns...) {
				name, err := tcpinfo.Congestion(c)
				if err != nil {
					t.Errorf("read back: %v", err)
				}
				got = append(got, name)
			}
			lis.mu.Unlock()
			mu.Unlock()
		})
		on(epoch, sample, sha)
	}
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 || slices.ContainsFunc(got, func(n string) bool { return n != cc }) {
		t.Errorf("congestion controls of the compute agent's then the storage agent's sockets: %v, want %q on both ends", got, cc)
	}
	if len(rec.epoch(0)) == 0 {
		t.Error("no sample delivered")
	}
	// Over TCP the round trip and loss come from the storage agent's end.
	r := reports[0]
	if l := r.Link; l == nil || !(l.RTTSeconds > 0) || !(l.MinRTTSeconds > 0) || l.RTTFrom != "storage_tcp_info" || !l.LossKnown ||
		l.SegmentsOut == 0 || l.Readings == 0 || l.WindowCount < cfg.Window || l.WindowBytes != cfg.WindowBytes {
		t.Errorf("epoch's link %+v: want the storage end's round trip and segments, a window of at least %d and %d bytes", l, cfg.Window, cfg.WindowBytes)
	}
	if len(r.ByStorage) != 1 || r.ByStorage[0].Link == nil {
		t.Errorf("by storage %+v: want the agent's link", r.ByStorage)
	}
}

// TestTCPCongestionRefused: a congestion control the kernel lacks is a
// start-up error naming the ones it has.
func TestTCPCongestionRefused(t *testing.T) {
	cfg, _ := testConfig(t, nil, "127.0.0.1:1")
	cfg.TCPCongestion = "no-such-cc"
	if _, err := cfg.new(); err == nil {
		t.Error("compute agent accepted --tcp-congestion no-such-cc")
	}
	if _, err := storageagent.New(storageagent.Config{Data: t.TempDir(), Insecure: true, TCPCongestion: "no-such-cc"}); err == nil {
		t.Error("storage agent accepted --tcp-congestion no-such-cc")
	}
}

// TestWindowGrowsWithRTT: on a link whose round trip is long (an Info
// call answered after 60 ms, the in-memory connection's only round trip)
// and whose rate is 2 MB/s, the fetch window grows past --window to cover
// twice the bandwidth-delay product, and the report says so; the next
// epoch starts from it (linkwatch.Memory). A --recv-window below the
// product is warned about.
func TestWindowGrowsWithRTT(t *testing.T) {
	// NB: 150 ms, so that the link's 2 MB/s need only keep above 0.44
	// MB/s over one reading's interval for its bandwidth x round trip to
	// pass the 64 KiB stream window: under the race detector and a
	// loaded machine a reading's interval can carry less than 2 MB/s.
	const rtt = 150 * time.Millisecond
	n := &enginetest.MemNet{}
	s := shapedFake(t, "s1", constBPS(2e6))
	s.InfoErr = func() error { time.Sleep(rtt); return nil }
	n.Serve(t, "s1:1", s)
	cfg, rec := testConfig(t, n, "s1:1")
	cfg.Plan = planner.NoOff()
	cfg.Epochs = 2
	cfg.Window = 2
	cfg.RecvWindow = MinRecvWindow // 64 KiB, under 2 MB/s x 150 ms
	var logs testutil.SyncBuffer
	cfg.Logger = zerolog.New(&logs).Level(zerolog.WarnLevel)
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reports {
		checkOnce(t, rec.epoch(r.Epoch), policyIDs())
		l := r.Link
		if l != nil {
			t.Logf("epoch %d: %.2f s, rtt %.1f ms (min %.1f), window %d requests", r.Epoch, r.Seconds, 1e3*l.RTTSeconds, 1e3*l.MinRTTSeconds, l.WindowCount)
		}
		if l == nil || l.RTTFrom != "info_rpc" || l.MinRTTSeconds < rtt.Seconds() || l.WindowCount <= cfg.Window {
			t.Errorf("epoch %d's link %+v: want a round trip of at least %v from the Info call and a window past %d", r.Epoch, l, rtt, cfg.Window)
		}
	}
	if !strings.Contains(logs.String(), "--recv-window is below the link's bandwidth x round trip") {
		t.Errorf("no warning about --recv-window %d in %s", cfg.RecvWindow, logs.String())
	}
}

// TestInfoNamesCongestion: the storage agent's Info names the congestion
// control of the connections it accepts (here its --tcp-congestion), and
// the compute agent counts its connections by it: one to an agent that
// sends by bbr on a long path, where a loss-based or unnamed one gets
// linkwatch.FirstConns before the loss is measured.
func TestInfoNamesCongestion(t *testing.T) {
	cc := otherCongestion(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	startStorage(t, storageagent.Config{Data: writeImageFolder(t, -1), Name: "st", CPUs: 1, AllowClientSpecs: true, Insecure: true, TCPCongestion: cc},
		storageagent.Knobs{}, inner)
	conn, err := grpc.NewClient(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := dataplanepb.NewStorageClient(conn).Info(ctx, &dataplanepb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetTcpCongestion() != cc {
		t.Errorf("Info names congestion control %q, want the agent's %q", info.GetTcpCongestion(), cc)
	}

	cfg, _ := testConfig(t, nil, "127.0.0.1:1")
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	conns := a.epochConns(engine.Opts{})
	const long = 80 * time.Millisecond
	first := linkwatch.FirstConns(0, long)
	if first < 2 {
		t.Fatalf("FirstConns at %v = %d: the test wants a path that stripes", long, first)
	}
	for _, tc := range []struct {
		cc   string
		want int
	}{{"bbr", 1}, {"cubic", first}, {"", first}} {
		if got := conns(&dataplanepb.InfoResponse{TcpCongestion: tc.cc}, long); got != tc.want {
			t.Errorf("an agent sending by %q at %v: %d connections, want %d", tc.cc, long, got, tc.want)
		}
	}
	a.cfg.Conns = 3
	if got := conns(&dataplanepb.InfoResponse{TcpCongestion: "bbr"}, long); got != 3 {
		t.Errorf("--conns 3 with bbr: %d connections, want 3", got)
	}
}
