package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// The benchmarks of issue 3's fourth point, over the real binaries:
//
//	go test -run '^$' -bench 'RawLoopback|LinkBound' -benchtime 1x ./testbed/
//
// BenchmarkRawLoopback measures unshaped loopback throughput of raw
// samples (split 0): the transport alone (a gRPC client in this process,
// 64 requests in flight on one Fetch stream, responses discarded) and
// agent to agent (the compute agent also decodes and crops every JPEG, so
// on a small machine it is CPU-bound). BenchmarkLinkBoundNoOff runs No-Off
// epochs over a shaped link (SHAPED_RATE, default 100mbit): tc tbf between
// two network namespaces when root, else the in-process shape.Proxy on
// loopback, and reports the link utilisation from the kernel's and the
// agent's byte counts, and the compute agent's peak RSS beside its window
// bound. BenchmarkLinkBoundTransport runs the transport alone over the same
// link, to tell flow-control limits from CPU limits. BENCH_IMAGES sets the dataset size (default 200 openimages-like
// images, about 63 MB); WINDOW_BYTES the compute agent's --window-bytes
// (default 16 MiB), BATCH and QUEUE its --batch and --queue (default 128
// and 4); COMPUTE_FLAGS adds flags to the compute agent's
// (space-separated, e.g. "--batch 32 --queue 2"); SHAPER=proxy uses the
// in-process proxy even as root.

// fastGPU is a simulated GPU so fast that it never bounds an epoch.
const fastGPU = "sim:1000000"

// tensorBytes is one finished sample of the imagenet-train pipeline: a
// 224x224x3 float32 tensor.
const tensorBytes = 224 * 224 * 3 * 4

// startStorageLoopback starts a storage agent binary on loopback and
// returns its address and pid; extra adds flags to the agent's.
func startStorageLoopback(b *testing.B, bins agentBinaries, data string, extra ...string) (string, int) {
	addr := testutil.FreeAddr(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	args := append([]string{"--data", data, "--listen", addr, "--log-level", "warn", "--log-format", "json"}, bins.storageSec...)
	p := start(b, command(ctx, bins.storage, append(args, extra...)...))
	p.waitListening(b, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})
	return addr, p.cmd.Process.Pid
}

// transportVariants are the gRPC client settings the transport benchmarks
// compare: grpc's defaults (64 KiB windows grown by BDP estimation) and
// fixed larger windows, which turn BDP estimation off.
var transportVariants = []struct {
	name string
	opts []grpc.DialOption
}{
	{"grpc-defaults", nil},
	{"window=1MiB", []grpc.DialOption{grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(1 << 20)}},
	{"window=16MiB", []grpc.DialOption{grpc.WithInitialWindowSize(16 << 20), grpc.WithInitialConnWindowSize(16 << 20)}},
}

// BenchmarkRawLoopback measures raw samples over unshaped loopback: the
// transport alone, then agent to agent.
func BenchmarkRawLoopback(b *testing.B) {
	bins := buildAgents(b)
	data, n, _ := dataset(b)
	addr, pid := startStorageLoopback(b, bins, data)

	b.Run("transport", func(b *testing.B) {
		for _, v := range transportVariants {
			b.Run(v.name, func(b *testing.B) { benchTransport(b, addr, pid, n, 64, v.opts) })
		}
	})
	// The real agents: the compute agent finishing every sample, then
	// fetching and validating them only (--fetch-only), which is the raw
	// agent-to-agent throughput.
	b.Run("agents", func(b *testing.B) { benchAgents(b, bins, addr, 2) })
	b.Run("agents-fetch-only", func(b *testing.B) { benchAgents(b, bins, addr, 6, "--fetch-only") })
}

// benchAgents runs the compute-agent binary against the storage agent at
// addr for epochs No-Off epochs and reports the wire MB/s of all epochs but
// the first.
func benchAgents(b *testing.B, bins agentBinaries, addr string, epochs int, extra ...string) {
	report := filepath.Join(b.TempDir(), "report.jsonl")
	var last computeRun
	for b.Loop() {
		os.Remove(report)
		args := append([]string{"--storage", addr, "--plan", "nooff", "--epochs", strconv.Itoa(epochs),
			"--gpu", fastGPU, "--report", report, "--log-level", "warn", "--log-format", "json"}, bins.computeSec...)
		last = runCompute(b, command(context.Background(), bins.compute, append(args, extra...)...), report, nil)
	}
	for _, e := range last.epochs {
		b.Logf("epoch %d: %d samples, %.1f MB in %.3f s = %.1f MB/s of wire bytes, %.0f img/s, compute CPU %.2f s",
			e.Epoch, e.Samples, float64(e.BytesReceived)/1e6, e.Seconds, float64(e.BytesReceived)/e.Seconds/1e6,
			float64(e.Samples)/e.Seconds, e.ComputeCPUSeconds)
	}
	// Steady state: every epoch after the first (which warms up the
	// connection, the page cache and the size estimates) counts.
	steady := last.epochs
	if len(steady) > 1 {
		steady = steady[1:]
	}
	var bytes, samples, secs float64
	for _, e := range steady {
		bytes += float64(e.BytesReceived)
		samples += float64(e.Samples)
		secs += e.Seconds
	}
	b.ReportMetric(bytes/secs/1e6, "wire-MB/s")
	b.ReportMetric(samples/secs, "img/s")
	b.ReportMetric(0, "ns/op")
}

// benchTransport fetches every sample raw (split 0) per iteration over one
// Fetch stream with window requests in flight, discarding the responses,
// from the storage agent at addr whose process is pid (0: in this
// process). Besides MB/s it reports the CPU time both ends spent per GB,
// which says what the transport would do on idle cores when other work
// shares the machine.
//
// It returns when the timed loop began and ended and the payload bytes
// received meanwhile.
func benchTransport(b *testing.B, addr string, pid, n, window int, opts []grpc.DialOption) (from, to time.Time, payload int64) {
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))}, opts...)
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	p, err := ops.LoadPipeline("imagenet-train")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := dataplanepb.NewStorageClient(conn).Fetch(ctx)
	if err != nil {
		b.Fatal(err)
	}
	pass := func(epoch uint64) int64 {
		sem := make(chan struct{}, window)
		var wg sync.WaitGroup
		var sendErr error
		wg.Go(func() {
			for i := range n {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				if sendErr = stream.Send(&dataplanepb.FetchRequest{Tag: uint64(i), Sample: uint64(i), Epoch: epoch, PipelineId: p.ID()}); sendErr != nil {
					return
				}
			}
		})
		var bytes int64
		for range n {
			resp, err := stream.Recv()
			if err != nil {
				cancel()
				wg.Wait()
				b.Fatalf("Recv: %v (send: %v)", err, sendErr)
			}
			if resp.Error != nil {
				b.Fatalf("sample %d: %v", resp.Sample, resp.Error)
			}
			bytes += int64(len(resp.Data))
			<-sem
		}
		wg.Wait()
		return bytes
	}
	// One pass first: the page cache and the flow-control windows warm up,
	// and it sizes an iteration for SetBytes.
	perPass := pass(0)
	b.SetBytes(perPass)
	epoch := uint64(1)
	cpu0, storage0 := selfCPU(), procCPU(pid)
	from = time.Now()
	for b.Loop() {
		payload += pass(epoch)
		epoch++
	}
	to = time.Now()
	client, storage := selfCPU()-cpu0, procCPU(pid)-storage0
	gb := float64(perPass) * float64(epoch-1) / 1e9
	b.ReportMetric(client.Seconds()/gb, "client-cpu-s/GB")
	if pid != 0 {
		b.ReportMetric(storage.Seconds()/gb, "storage-cpu-s/GB")
	}
	stream.CloseSend()
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		b.Logf("stream end: %v", err)
	}
	return from, to, payload
}

// selfCPU is this process's CPU time (user and system) so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is process pid's CPU time so far (from /proc, in clock ticks of
// 10 ms); 0 when pid is 0 or unreadable.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14 and stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// shapedLink is a storage agent behind a shaped link, with the counters
// that measure the link.
type shapedLink struct {
	rate shape.Rate
	bits float64 // rate in bits per second
	// addr is the storage agent's address as the compute side dials it;
	// storagePID its process.
	addr       string
	storagePID int
	// command runs a program on the compute side of the link.
	command func(name string, args ...string) *exec.Cmd
	// dial connects from the compute side.
	dial func(ctx context.Context, addr string) (net.Conn, error)
	// sample adds the storage side's bytes sent so far to sent: the
	// storage veth's transmitted bytes, or the proxy's bytes forwarded to
	// the compute side.
	sample func()
	sent   *series
	// charged reads tbf's byte counter on the storage end (tc is too slow
	// to poll); nil for the proxy.
	charged func() float64
}

// newShapedLink starts a storage agent on data behind a link shaped at
// SHAPED_RATE (default 100mbit): tc tbf between two namespaces when root
// (and SHAPER is not "proxy"), else a shape.Proxy on loopback. storageArgs
// adds flags to the storage agent's (e.g. --cpus).
func newShapedLink(b *testing.B, bins agentBinaries, data string, storageArgs ...string) *shapedLink {
	text := os.Getenv("SHAPED_RATE")
	if text == "" {
		text = "100mbit"
	}
	rate, err := shape.ParseRate(text)
	if err != nil {
		b.Fatal(err)
	}
	bits := rate.Bits()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	l := &shapedLink{rate: rate, bits: bits, sent: &series{}}
	nsErr := netns.Available()
	if nsErr == nil && os.Getenv("SHAPER") == "proxy" {
		nsErr = errors.New("SHAPER=proxy")
	}
	if nsErr == nil {
		pair, err := netns.Setup(ctx, netns.Config{Rate: rate})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := pair.Close(); err != nil {
				b.Error(err)
			}
		})
		b.Logf("link: tc tbf %s both ways between namespaces %s (storage %s) and %s (compute %s)",
			rate, pair.StorageNS, pair.StorageIP, pair.ComputeNS, pair.ComputeIP)
		l.addr = net.JoinHostPort(pair.StorageIP, "7070")
		// Certificates valid for the storage namespace's address.
		storageSec, computeSec, err := AgentCerts(filepath.Join(b.TempDir(), "certs"), pair.StorageIP)
		if err != nil {
			b.Fatal(err)
		}
		l.command = func(name string, args ...string) *exec.Cmd {
			if name == bins.compute {
				args = append(args, computeSec...)
			}
			return pair.Command(ctx, false, name, args...)
		}
		l.dial = func(ctx context.Context, addr string) (net.Conn, error) { return pair.Dial(ctx, false, "tcp", addr) }
		sargs := append([]string{"--data", data, "--listen", l.addr, "--log-level", "warn", "--log-format", "json"}, storageSec...)
		sargs = append(sargs, storageArgs...)
		sp := start(b, pair.Command(ctx, true, bins.storage, sargs...))
		sp.waitListening(b, func(ctx context.Context) (net.Conn, error) { return l.dial(ctx, l.addr) })
		l.storagePID = sp.cmd.Process.Pid
		l.sample = func() {
			now := time.Now()
			c, err := pair.Counters()
			if err != nil {
				b.Error(err)
				return
			}
			l.sent.add(now, float64(c.Storage.TxBytes))
		}
		l.charged = func() float64 {
			q, err := pair.Qdisc(ctx, true)
			if err != nil {
				b.Fatal(err)
			}
			return float64(q.Bytes)
		}
		return l
	}
	b.Logf("link: no namespaces (%v): shaping in process instead, shape.Proxy at %s both ways on loopback", nsErr, rate)
	target, pid := startStorageLoopback(b, bins, data, storageArgs...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	px := &shape.Proxy{Target: target, Rate: rate}
	served := make(chan error, 1)
	go func() { served <- px.ServeListener(ctx, lis) }()
	b.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			b.Error(err)
		}
	})
	l.addr, l.storagePID = lis.Addr().String(), pid
	l.command = func(name string, args ...string) *exec.Cmd {
		if name == bins.compute {
			args = append(args, bins.computeSec...)
		}
		return command(ctx, name, args...)
	}
	l.dial = func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	l.sample = func() { l.sent.add(time.Now(), float64(px.Stats().Down)) }
	return l
}

// measure runs f, sampling the link's counters, and returns how many bytes
// tbf charged per veth byte meanwhile (1 for the proxy): a GSO packet is
// charged every segment's headers, the veth counts one set.
func (l *shapedLink) measure(f func()) (chargedPerSent float64) {
	l.sent = &series{}
	var q0 float64
	if l.charged != nil {
		q0 = l.charged()
	}
	l.sample()
	f()
	l.sample()
	if l.charged == nil {
		return 1
	}
	if d := l.sent.during(l.sent.t[0], l.sent.t[len(l.sent.t)-1]); d > 0 {
		return (l.charged() - q0) / d
	}
	return 1
}

// utilisation describes the link's use over [from, to] in which the
// receiver counted payload bytes: it returns the wire utilisation (bytes
// as the shaper charged them over the link's capacity) and a line of
// figures.
func (l *shapedLink) utilisation(from, to time.Time, payload int64, chargedPerSent float64) (float64, string) {
	capacity := to.Sub(from).Seconds() * l.bits / 8
	sent := l.sent.during(from, to)
	msg := fmt.Sprintf("payload %.2f MB = %.1f%% of %s", float64(payload)/1e6, 100*float64(payload)/capacity, l.rate)
	if l.charged == nil {
		msg += fmt.Sprintf("; proxy forwarded %.2f MB = %.1f%%; payload/proxy bytes %.4f",
			sent/1e6, 100*sent/capacity, float64(payload)/sent)
		return sent / capacity, msg
	}
	wire := sent * chargedPerSent
	msg += fmt.Sprintf("; kernel: veth tx %.2f MB = %.1f%%, tbf charged %.2f MB = %.1f%% (x%.4f for per-segment headers); payload/veth bytes %.4f",
		sent/1e6, 100*sent/capacity, wire/1e6, 100*wire/capacity, chargedPerSent, float64(payload)/sent)
	return wire / capacity, msg
}

// BenchmarkLinkBoundNoOff runs two No-Off epochs of the compute agent
// over the shaped link.
func BenchmarkLinkBoundNoOff(b *testing.B) {
	windowBytes := envInt(b, "WINDOW_BYTES", 16<<20)
	batch, queue := envInt(b, "BATCH", 128), envInt(b, "QUEUE", 4)
	bins := buildAgents(b)
	data, _, _ := dataset(b)
	l := newShapedLink(b, bins, data)
	report := filepath.Join(b.TempDir(), "report.jsonl")
	extra := strings.Fields(os.Getenv("COMPUTE_FLAGS"))
	args := append([]string{"--storage", l.addr, "--plan", "nooff", "--epochs", "2", "--gpu", fastGPU,
		"--window-bytes", strconv.Itoa(windowBytes), "--batch", strconv.Itoa(batch), "--queue", strconv.Itoa(queue),
		"--report", report, "--log-level", "warn", "--log-format", "json"}, extra...)
	// The compute agent's data in memory is bounded by the window (wire
	// bytes in flight) plus the finished tensors: the shared queue
	// (queue x batch samples), the batch being formed and the one the
	// consumer holds, each sample a 224x224x3 float32 tensor.
	dataBound := float64(windowBytes) + float64((queue+2)*batch)*tensorBytes

	var run computeRun
	var chargedPerSent float64
	var storageCPU time.Duration
	for b.Loop() {
		os.Remove(report)
		cpu0 := procCPU(l.storagePID)
		chargedPerSent = l.measure(func() { run = runCompute(b, l.command(bins.compute, args...), report, l.sample) })
		storageCPU = procCPU(l.storagePID) - cpu0
	}

	var util, agentUtil float64
	for _, e := range run.epochs {
		var msg string
		util, msg = l.utilisation(e.start(), e.end(), e.BytesReceived, chargedPerSent)
		agentUtil = float64(e.BytesReceived) / (e.Seconds * l.bits / 8)
		b.Logf("epoch %d: %.3f s, %d samples, compute CPU %.2f s (of %.2f core-s), GPU idle %.0f%%; %s",
			e.Epoch, e.Seconds, e.Samples, e.ComputeCPUSeconds, e.Seconds*float64(runtime.NumCPU()), 100*e.GPUIdleFraction, msg)
	}
	if len(extra) > 0 {
		b.Logf("compute agent flags added: %s", strings.Join(extra, " "))
	}
	b.Logf("storage agent CPU %.2f s over the run; compute agent: wall %.2f s for %d epochs, peak RSS %.1f MiB (VmHWM; ru_maxrss %.1f MiB); "+
		"--window-bytes %.1f MiB; data bound %.1f MiB = window + (queue %d + 2) x batch %d x %.0f KB tensors",
		storageCPU.Seconds(), run.wall.Seconds(), len(run.epochs), float64(run.peakRSS)/(1<<20), float64(run.maxRSS)/(1<<20),
		float64(windowBytes)/(1<<20), dataBound/(1<<20), queue, batch, tensorBytes/1e3)
	// The last epoch's figures: the first one includes TCP's and gRPC's
	// flow-control ramp-up.
	b.ReportMetric(100*util, "link-util-%")
	b.ReportMetric(100*agentUtil, "agent-util-%")
	b.ReportMetric(float64(run.peakRSS)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(windowBytes)/(1<<20), "window-MiB")
	b.ReportMetric(dataBound/(1<<20), "data-bound-MiB")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLinkBoundTransport fetches the dataset raw over the shaped
// link with a gRPC client on the compute side (64 requests in flight on
// one stream, responses discarded): the link's utilisation without the
// compute agent's decoding, which tells flow control from CPU limits.
func BenchmarkLinkBoundTransport(b *testing.B) {
	bins := buildAgents(b)
	data, n, _ := dataset(b)
	l := newShapedLink(b, bins, data)
	for _, v := range transportVariants {
		b.Run(v.name, func(b *testing.B) {
			opts := append([]grpc.DialOption{grpc.WithContextDialer(l.dial)}, v.opts...)
			var from, to time.Time
			var payload int64
			var chargedPerSent float64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			chargedPerSent = l.measure(func() {
				wg.Go(func() {
					t := time.NewTicker(5 * time.Millisecond)
					defer t.Stop()
					for {
						select {
						case <-stop:
							return
						case <-t.C:
							l.sample()
						}
					}
				})
				from, to, payload = benchTransport(b, l.addr, l.storagePID, n, 64, opts)
				close(stop)
				wg.Wait()
			})
			util, msg := l.utilisation(from, to, payload, chargedPerSent)
			b.Log(msg)
			b.ReportMetric(100*util, "link-util-%")
		})
	}
}
