package storageagent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sophon-dl/sophon/internal/errkind"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

// The agent under hostile input, as an operator runs it: the binary with
// its defaults (mutual TLS, --cpus 2), its peak RSS read from /proc.

// rssLimit is the peak resident set the agent must stay under.
const rssLimit = 512 << 20

// storageBinary returns the storage-agent command (testutil.Binary, built
// once per go test run); the tests that run it skip under -race (see below).
func storageBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if raceEnabled {
		// The agent under test is a separate process, not built with
		// -race, while this client would be slowed by the detector: its
		// timings would measure the detector. make test runs these tests
		// in a run of their own without -race.
		t.Skip("SKIP under -race: make test runs the binary tests without it")
	}
	return testutil.Binary(t, "storage-agent")
}

// agentProc is a running storage-agent binary and clients of its peers.
type agentProc struct {
	cmd   *exec.Cmd
	logs  *bytes.Buffer
	mu    sync.Mutex
	addr  string
	certs tlsconf.DevFiles
	done  chan error
}

// startBinary starts the agent on data with mutual TLS and extra flags; its
// certificates name the storage agent and the compute peers "good" and
// "hostile".
func startBinary(t *testing.T, data string, extra ...string) *agentProc {
	t.Helper()
	bin := storageBinary(t)
	certs, err := tlsconf.WriteDevCerts(tlsconf.DevCerts{Dir: t.TempDir(), Storage: []string{"storage-1"},
		Compute: []string{"good", "hostile"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	st := certs.Storage["storage-1"]
	p := &agentProc{addr: testutil.FreeAddr(t), certs: certs, logs: &bytes.Buffer{}, done: make(chan error, 1)}
	args := append([]string{"--data", data, "--listen", p.addr, "--cpus", "2", "--name", "storage-1",
		"--tls-cert", st.Cert, "--tls-key", st.Key, "--tls-ca", st.CA, "--log-format", "json", "--index", "-"}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = (*lockedWriter)(p), (*lockedWriter)(p)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

type lockedWriter agentProc

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.Write(b)
}

func (p *agentProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// client dials the agent as compute peer name and waits until it answers.
func (p *agentProc) client(t *testing.T, name string) (dataplanepb.StorageClient, *grpc.ClientConn) {
	t.Helper()
	tc, err := p.certs.Compute[name].Client(tlsconf.Expect{Cluster: tlsconf.DefaultCluster, Role: tlsconf.RoleStorage})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(tlsconf.Credentials(tc, nil)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := dataplanepb.NewStorageClient(conn)
	for deadline := time.Now().Add(20 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Info(ctx, &dataplanepb.InfoRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			return c, conn
		}
		select {
		case err := <-p.done:
			t.Fatalf("agent exited: %v\n%s", err, p.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not answering: %v\n%s", err, p.log())
		}
	}
}

// cpuTicks is the CPU time the agent has used, in clock ticks (user and
// system, from /proc).
func (p *agentProc) cpuTicks(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which is in parentheses: the
	// state is the first, utime and stime the 12th and 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("/proc stat: %q", b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc stat: %q", b)
	}
	return utime + stime
}

// settle waits until the agent is idle, under a tenth of a core over a
// quarter of a second (clock ticks are 10 ms), so that what a client set
// off has ended before the next measurement. It gives up after 20 s.
func (p *agentProc) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	prev := p.cpuTicks(t)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		cur := p.cpuTicks(t)
		if cur-prev <= 2 {
			return
		}
		prev = cur
	}
	t.Logf("the agent did not go idle within 20 s")
}

// peakRSS is the agent's VmHWM in bytes.
func (p *agentProc) peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func (p *agentProc) serving(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: dataplanepb.Storage_ServiceDesc.ServiceName})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v\n%s", r, err, p.log())
	}
}

// watchCanary reports every open or read of path from now on.
func watchCanary(t *testing.T, path string) func() int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN|unix.IN_ACCESS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func() int {
		buf := make([]byte, 4096)
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			return 0
		}
		return n / unix.SizeofInotifyEvent
	}
}

// TestHostileCorpusAgainstBinary serves a data directory holding the
// hostile JPEG corpus (ops/hostile), the path and symlink cases of
// datasettest.Cases built before start, and 1,000 good samples. Every hostile
// sample must fail with its typed error naming it within 1 s (or decode,
// where the corpus says it does); the agent stays SERVING and then serves
// the 1,000 good samples; its peak RSS stays under 512 MiB; the canary
// outside the root is never opened and never served.
func TestHostileCorpusAgainstBinary(t *testing.T) {
	storageBinary(t) // skips early where it would skip later
	e := datasettest.NewEnv(t, "folder")
	paths := 0
	for _, tc := range datasettest.Cases() {
		if tc.Layout == "" && tc.Build != nil && tc.After == nil && !tc.NeedUser {
			tc.Build(t, e)
			paths++
		}
	}
	corpus := hostile.Corpus()
	cats := map[string]bool{}
	for i, c := range corpus {
		cats[c.Category] = true
		datasettest.WriteFile(t, e.P(fmt.Sprintf("hostile/%03d.jpg", i)), c.Data)
	}
	// Path cases that happen after the agent indexed the files.
	swaps := []func(name string){
		func(name string) { datasettest.Must(t, os.Remove(name)); datasettest.Symlink(t, e.Canary, name) },
		func(name string) {
			datasettest.Must(t, os.Remove(name))
			datasettest.WriteFile(t, name, datasettest.JPEG(t, 3))
		},
		func(name string) { datasettest.Must(t, os.Truncate(name, 100)) },
		func(name string) { datasettest.Must(t, os.Remove(name)) },
		func(name string) { datasettest.Must(t, os.Remove(name)); datasettest.Must(t, unix.Mkfifo(name, 0o644)) },
		func(name string) { datasettest.Must(t, os.Remove(name)); datasettest.Symlink(t, "/etc/passwd", name) },
		// Same device, inode and size, other bytes: only the content hash
		// tells.
		func(name string) { datasettest.OverwriteAt(t, name, 0, datasettest.SameSizeJPEG(t, e.Img)) },
		func(name string) {
			datasettest.Must(t, os.Remove(name))
			datasettest.WriteFile(t, name, datasettest.SameSizeJPEG(t, e.Img))
		},
	}
	for k := range swaps {
		datasettest.WriteFile(t, e.P(fmt.Sprintf("swap/%d.jpg", k)), e.Img)
	}
	paths += len(swaps)
	if len(corpus) < 40 || len(cats) < 12 || paths < 30 {
		t.Fatalf("%d files in %d categories and %d path cases: want at least 40, 12 and 30", len(corpus), len(cats), paths)
	}
	const good = 1000
	for i := range good {
		datasettest.WriteFile(t, e.P(fmt.Sprintf("zgood/%04d.jpg", i)), datasettest.JPEG(t, uint64(i%10)))
	}
	opened := watchCanary(t, e.Canary)
	ds, err := dataset.OpenWith(e.Dir, dataset.OpenOptions{Index: "-"})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()

	p := startBinary(t, e.Dir)
	c, conn := p.client(t, "good")
	for k, swap := range swaps {
		swap(e.P(fmt.Sprintf("swap/%d.jpg", k)))
	}
	id := preset(t, "imagenet-train").ID()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stream, err := c.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var goodIDs []uint64
	checked := 0
	for i := range ds.Len() {
		path := ds.Path(i)
		if strings.HasPrefix(path, "zgood/") {
			goodIDs = append(goodIDs, i)
			continue
		}
		var want error
		switch {
		case strings.HasPrefix(path, "hostile/"):
			var k int
			fmt.Sscanf(strings.TrimPrefix(path, "hostile/"), "%03d.jpg", &k)
			want = corpus[k].Want
		case strings.HasPrefix(path, "swap/"):
			want = dataset.ErrRead
		default:
			continue // a path case that indexing let through: a good image
		}
		begin := time.Now()
		if err := stream.Send(&dataplanepb.FetchRequest{Tag: i, Sample: i, Split: 5, PipelineId: id}); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: stream ended: %v\n%s", path, err, p.log())
		}
		took := time.Since(begin)
		checked++
		if took > time.Second {
			t.Errorf("%s: answered in %v, want under 1 s", path, took)
		}
		if bytes.Contains(r.Data, []byte(datasettest.CanaryMark)) {
			t.Fatalf("%s: the canary was served", path)
		}
		switch {
		case want == nil && r.Error != nil:
			t.Errorf("%s: %v, want it decoded", path, r.Error)
		case want != nil && (r.Error == nil || r.Error.Kind != errorKind(want)):
			t.Errorf("%s: %v, want %v", path, r.Error, errkind.Name(errorKind(want)))
		case want != nil && !strings.Contains(r.Error.Message, fmt.Sprintf("sample %d", i)):
			t.Errorf("%s: message %q does not name sample %d", path, r.Error.Message, i)
		}
	}
	if checked != len(corpus)+len(swaps) {
		t.Fatalf("checked %d of %d corpus files and %d swapped files", checked, len(corpus), len(swaps))
	}
	p.serving(t, conn)
	if len(goodIDs) != good {
		t.Fatalf("%d good samples in the catalog, want %d", len(goodIDs), good)
	}
	var reqs []*dataplanepb.FetchRequest
	for k, i := range goodIDs {
		reqs = append(reqs, &dataplanepb.FetchRequest{Tag: uint64(k), Sample: i, Split: 5, PipelineId: id})
	}
	for tag, r := range fetchAll(t, c, reqs) {
		if r.Error != nil {
			t.Fatalf("good sample %d after the corpus: %v", tag, r.Error)
		}
	}
	p.serving(t, conn)
	for _, f := range []string{"good/evil.jpg", "good/passwd.jpg", "escapes-root"} {
		if !strings.Contains(p.log(), f) {
			t.Errorf("the operator's log does not mention %q", f)
		}
	}
	if n := opened(); n > 0 {
		t.Errorf("the canary outside the root was opened or read (%d inotify events)", n)
	}
	rss := p.peakRSS(t)
	t.Logf("corpus: %d files, %d categories, %d path cases; %d good samples after; peak RSS %d MiB", len(corpus), len(cats), paths, good, rss>>20)
	if rss > rssLimit {
		t.Errorf("peak RSS %d MiB, want under %d MiB", rss>>20, rssLimit>>20)
	}
}

// TestHostileClientsAgainstBinary: while a hostile peer sends oversized and
// malformed specs, opens 1,000 streams and never reads, a well-behaved peer
// keeps at least 80% of its solo throughput and the agent's peak RSS stays
// under 512 MiB.
//
// The machine may be shared, and other load slows whichever measurement it
// overlaps, so solo and attacked runs alternate (solo, attacked, solo, ...,
// solo: the attack is started and ended around each attacked run) and the
// throughputs compared are the medians of each kind's runs: load that
// comes and goes hits both sides alike, and one run that a burst of it
// slowed (an attacked run at 165 samples/s between two at 374 and 382, on
// 2026-11-30, made the runs' sums 0.65 of solo) does not decide; an attack
// that starves the peer lowers every attacked run. Each run starts once the
// agent has gone idle (settle): an attacked one once the agent has refused
// the streams past its limits and filled the others' windows, which takes
// longer the busier the machine, so that a run measures the attack going
// on, not its start. An attack that keeps the agent busy never lets it
// settle and is measured anyway; one that starves the peer lowers the
// attacked runs whatever the load.
func TestHostileClientsAgainstBinary(t *testing.T) {
	storageBinary(t)
	dir := t.TempDir()
	const n = 120
	var images [12][]byte // each written n/12 times
	for i := range n {
		b := images[i%12]
		if b == nil {
			var err error
			if b, err = synth.JPEG(uint64(i%12), 640, 480, synth.Options{}); err != nil {
				t.Fatal(err)
			}
			images[i%12] = b
		}
		datasettest.WriteFile(t, filepath.Join(dir, fmt.Sprintf("c%d", i%3), fmt.Sprintf("%03d.jpg", i)), b)
	}
	p := startBinary(t, dir, "--allow-client-specs")
	good, goodConn := p.client(t, "good")
	bad, _ := p.client(t, "hostile")
	id := preset(t, "imagenet-train").ID()

	// rate runs 240 fetches and returns the samples and the seconds taken.
	rate := func() (float64, float64) {
		var reqs []*dataplanepb.FetchRequest
		for i := range uint64(2 * n) {
			reqs = append(reqs, &dataplanepb.FetchRequest{Tag: i, Sample: i % n, Epoch: i / n, Split: 5, PipelineId: id})
		}
		begin := time.Now()
		for tag, r := range fetchAll(t, good, reqs) {
			if r.Error != nil {
				t.Fatalf("good peer, tag %d: %v", tag, r.Error)
			}
		}
		return float64(len(reqs)), time.Since(begin).Seconds()
	}
	rate() // warm up

	// Oversized and malformed specs: each a BAD_REQUEST or TOO_LARGE
	// sample error, or the stream refused for a message over the limit.
	specs := [][]byte{
		[]byte(`{"name": "huge", "ops": [{"op": "decode"}, {"op": "resize", "size": [32768, 32768]}, {"op": "to_tensor"}]}`),
		[]byte(`{"name": "neg", "ops": [{"op": "decode"}, {"op": "resize", "size": [-5, 7]}]}`),
		[]byte("{name: x, ops: [{op: sharpen}]}"),
		[]byte("\x00\x01garbage"),
		[]byte("a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"),
		bytes.Repeat([]byte(" "), 40<<10),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	specStream, err := bad.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k, spec := range specs {
		pid := fmt.Sprintf("x@%012d", k)
		if sp, err := ops.ParseSpec(spec); err == nil {
			if pl, err := sp.Build(); err == nil {
				pid = pl.ID()
			}
		}
		if err := specStream.Send(&dataplanepb.FetchRequest{Tag: uint64(k), Sample: 1, Split: 2, PipelineId: pid, PipelineSpec: spec}); err != nil {
			t.Fatal(err)
		}
		r, err := specStream.Recv()
		if err != nil {
			t.Fatalf("spec %d: %v", k, err)
		}
		if r.Error == nil || (r.Error.Kind != dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST && r.Error.Kind != dataplanepb.ErrorKind_ERROR_KIND_TOO_LARGE) {
			t.Errorf("spec %d: %v, want BAD_REQUEST or TOO_LARGE", k, r.Error)
		}
	}
	big, err := bad.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	big.Send(&dataplanepb.FetchRequest{Sample: 1, Split: 2, PipelineId: "x", PipelineSpec: bytes.Repeat([]byte("y"), 1<<20)})
	if _, err := big.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 1 MiB request: %v, want RESOURCE_EXHAUSTED", err)
	}

	// attack opens 1,000 streams that send requests and never read, over
	// 16 connections (64 streams each at most), and a slow trickle of bad
	// specs; it returns once the agent has refused the streams past its
	// limits and filled the others' windows (it has gone idle), with the
	// function that ends the attack.
	var accepted, refused atomic.Int64
	attack := func() (stop func()) {
		actx, acancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for c := range 16 {
			// NB: each attack dials new connections. Opening the next
			// attack's streams on the connections of an ended one (whose
			// cancelled streams left responses unread) slows the good peer
			// far more, a case this test does not set out to measure.
			cl, _ := p.client(t, "hostile")
			for s := range 63 {
				if c*63+s >= 1000 {
					break
				}
				wg.Go(func() {
					st, err := cl.Fetch(actx)
					if err != nil {
						refused.Add(1)
						return
					}
					for i := uint64(0); ; i++ {
						if st.Send(&dataplanepb.FetchRequest{Tag: i, Sample: i % n, Split: 1, PipelineId: id}) != nil {
							break
						}
					}
					if _, err := st.Recv(); status.Code(err) == codes.ResourceExhausted {
						refused.Add(1)
					} else {
						accepted.Add(1)
					}
				})
			}
		}
		if trickle, err := bad.Fetch(actx); err == nil {
			wg.Go(func() {
				for k := uint64(0); actx.Err() == nil; k++ {
					if trickle.Send(&dataplanepb.FetchRequest{Tag: k, Sample: 1, Split: 2, PipelineId: "x", PipelineSpec: specs[k%4]}) != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
			wg.Go(func() {
				for {
					if _, err := trickle.Recv(); err != nil {
						return
					}
				}
			})
		}
		p.settle(t)
		return func() {
			acancel()
			wg.Wait()
			p.settle(t) // the agent drops what the streams left
		}
	}
	const rounds = 3 // attacks, between rounds+1 solo runs
	// The runs' samples and seconds, summed by kind.
	var solo, loaded [2]float64
	var soloRates, loadedRates []float64
	add := func(sum *[2]float64, rates *[]float64) {
		n, sec := rate()
		sum[0], sum[1] = sum[0]+n, sum[1]+sec
		*rates = append(*rates, n/sec)
	}
	add(&solo, &soloRates)
	for r := range rounds {
		stop := attack()
		add(&loaded, &loadedRates)
		if r == rounds-1 {
			p.serving(t, goodConn)
		}
		stop()
		add(&solo, &soloRates)
	}
	rss := p.peakRSS(t)
	cancel()
	soloMed, loadedMed := median(soloRates), median(loadedRates)
	ratio := loadedMed / soloMed
	t.Logf("solo %.0f samples/s, under attack %.0f (%.2f; the runs' sums %.2f); streams: %d held open, %d refused over %d attacks; peak RSS %d MiB (runs: solo %.0f, attacked %.0f)",
		soloMed, loadedMed, ratio, (loaded[0]/loaded[1])/(solo[0]/solo[1]), accepted.Load(), refused.Load(), rounds, rss>>20, soloRates, loadedRates)
	if ratio < 0.8 {
		t.Errorf("the well-behaved peer got %.0f samples/s under attack (median), %.2f of its solo %.0f; want at least 0.8 (runs: solo %.0f, attacked %.0f)",
			loadedMed, ratio, soloMed, soloRates, loadedRates)
	}
	if rss > rssLimit {
		t.Errorf("peak RSS %d MiB, want under %d MiB", rss>>20, rssLimit>>20)
	}
	if refused.Load() < rounds*(1000-DefaultMaxStreamsPerPeer) {
		t.Errorf("%d of %d streams refused, want all but the per-peer limit of %d in each attack", refused.Load(), rounds*1000, DefaultMaxStreamsPerPeer)
	}
}

// median is the middle of xs (the mean of the two middle ones for an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
