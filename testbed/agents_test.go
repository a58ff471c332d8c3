package testbed

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/testbed/netns"
)

// This file holds what the agent benchmarks share: the binaries built
// once per test process, a generated dataset, and processes that die with
// the benchmark.

// TestMain removes this process's namespaces and scratch files on Ctrl-C,
// and checks after the run that no namespace or link is left.
func TestMain(m *testing.M) {
	stop := netns.RemoveOnSignal(netns.ProcessPrefix(), removeScratch)
	code := m.Run()
	stop()
	removeScratch()
	if netns.Available() == nil {
		if left, err := netns.Leftovers(netns.ProcessPrefix()); err != nil || len(left) > 0 {
			fmt.Fprintf(os.Stderr, "testbed: left behind: %v (%v)\n", left, err)
			netns.Remove(netns.ProcessPrefix())
			code = 1
		}
	}
	os.Exit(code)
}

var (
	scratchMu  sync.Mutex
	scratchDir string // made on first use; removed by TestMain
)

// scratch returns the directory the shared binaries and dataset go in.
func scratch(tb testing.TB) string {
	tb.Helper()
	scratchMu.Lock()
	defer scratchMu.Unlock()
	if scratchDir == "" {
		d, err := os.MkdirTemp("", netns.ProcessPrefix()+"bench-")
		if err != nil {
			tb.Fatal(err)
		}
		scratchDir = d
	}
	return scratchDir
}

func removeScratch() {
	scratchMu.Lock()
	defer scratchMu.Unlock()
	if scratchDir != "" {
		os.RemoveAll(scratchDir)
		scratchDir = ""
	}
}

// agentBinaries are the paths of the built storage-agent and compute-agent,
// and each agent's security flags: certificates of a fresh development CA
// valid on loopback, and a gossip key (AgentCerts).
type agentBinaries struct {
	storage, compute       string
	storageSec, computeSec []string
}

var (
	buildOnce sync.Once
	built     agentBinaries
	buildErr  error
)

// buildAgents returns the two agent binaries (built once per go test run)
// and their security flags.
// STORAGE_AGENT_BIN and COMPUTE_AGENT_BIN replace them with binaries built
// elsewhere (for trying agent options without editing the agents).
func buildAgents(tb testing.TB) agentBinaries {
	tb.Helper()
	dir := scratch(tb)
	buildOnce.Do(func() {
		bins := testutil.Binaries(tb)
		built = agentBinaries{storage: filepath.Join(bins, "storage-agent"), compute: filepath.Join(bins, "compute-agent")}
		built.storageSec, built.computeSec, buildErr = AgentCerts(filepath.Join(dir, "certs"))
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	bins := built
	// Experiments with modified agents: binaries built elsewhere.
	if p := os.Getenv("STORAGE_AGENT_BIN"); p != "" {
		bins.storage = p
	}
	if p := os.Getenv("COMPUTE_AGENT_BIN"); p != "" {
		bins.compute = p
	}
	return bins
}

var (
	dataOnce  sync.Once
	dataDir   string
	dataBytes int64
	dataN     int
	dataErr   error
)

// benchImages is the dataset's size: BENCH_IMAGES or 200.
func benchImages(tb testing.TB) int {
	return envInt(tb, "BENCH_IMAGES", 200)
}

// dataset generates an openimages-like dataset once per test process and
// returns its folder, its sample count and its total bytes.
func dataset(tb testing.TB) (string, int, int64) {
	tb.Helper()
	n := benchImages(tb)
	dir := filepath.Join(scratch(tb), "openimages-like")
	dataOnce.Do(func() {
		paths, err := synth.WriteImageFolder(dir, synth.OpenImagesLike, 1, n, 4)
		if err != nil {
			dataErr = err
			return
		}
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				dataErr = err
				return
			}
			dataBytes += fi.Size()
		}
		dataDir, dataN = dir, len(paths)
	})
	if dataErr != nil {
		tb.Fatal(dataErr)
	}
	return dataDir, dataN, dataBytes
}

func envInt(tb testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}

// command returns a command in its own process group that dies with this
// process (Pdeathsig) and whose whole group is killed when ctx ends.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return netns.GroupCommand(ctx, name, args...)
}

// proc is a started background process (a storage agent).
type proc struct {
	cmd  *exec.Cmd
	logs *testutil.SyncBuffer
	done chan struct{}
	err  error
}

// start starts cmd and stops it (SIGTERM, then SIGKILL to its group) when
// the benchmark ends.
func start(tb testing.TB, cmd *exec.Cmd) *proc {
	tb.Helper()
	p := &proc{cmd: cmd, logs: &testutil.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// waitListening dials until the process answers on addr, it exits, or 20 s
// pass.
func (p *proc) waitListening(tb testing.TB, dial func(ctx context.Context) (net.Conn, error)) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := dial(ctx)
		cancel()
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.done:
			tb.Fatalf("%s exited: %v\n%s", p.cmd.Path, p.err, p.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not listening after 20 s: %v\n%s", p.cmd.Path, err, p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// epoch is one report line of the compute agent and when the benchmark
// first saw it.
type epoch struct {
	report.EpochReport
	seen time.Time
}

// start and end are the epoch's wall-clock bounds as the benchmark saw
// them: the line is written as the epoch ends, and seen within one poll.
func (e epoch) end() time.Time { return e.seen }
func (e epoch) start() time.Time {
	return e.seen.Add(-time.Duration(e.Seconds * float64(time.Second)))
}

// computeRun is what a finished compute agent left.
type computeRun struct {
	epochs []epoch
	// peakRSS is the agent's peak resident set in bytes: the last VmHWM
	// polled from /proc while it ran (VmHWM only grows; polls are 5 ms
	// apart). maxRSS is ru_maxrss of the exited process, an upper bound:
	// NB: it also counts the high-water mark of this process, whose memory
	// the child shared between (v)fork and exec.
	peakRSS, maxRSS int64
	wall            time.Duration
}

// runCompute runs cmd (a compute agent writing its report to report) to
// the end, calling tick every poll interval while it runs, and returns its
// epochs and peak memory.
func runCompute(tb testing.TB, cmd *exec.Cmd, reportPath string, tick func()) computeRun {
	tb.Helper()
	logs := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	began := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var run computeRun
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	var werr error
	for finished := false; !finished; {
		select {
		case werr = <-done:
			finished = true
		case <-poll.C:
		}
		if tick != nil {
			tick()
		}
		if !finished {
			if hwm := vmHWM(status); hwm > 0 {
				run.peakRSS = hwm
			}
		}
		lines, err := report.ReadReport(reportPath)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range lines[len(run.epochs):] {
			run.epochs = append(run.epochs, epoch{EpochReport: r, seen: time.Now()})
		}
	}
	run.wall = time.Since(began)
	if werr != nil {
		tb.Fatalf("compute agent: %v\n%s", werr, logs.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.maxRSS = ru.Maxrss << 10
	}
	for _, e := range run.epochs {
		if e.SamplesFailed > 0 || e.Samples != e.Shard {
			tb.Fatalf("epoch %d delivered %d of %d samples, %d failed: %+v", e.Epoch, e.Samples, e.Shard, e.SamplesFailed, e.Failed)
		}
	}
	return run
}

// vmHWM reads VmHWM (peak resident set) from a /proc/<pid>/status file,
// in bytes; 0 when it cannot.
func vmHWM(status string) int64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v << 10
			}
		}
	}
	return 0
}

// series is a counter sampled over time.
type series struct {
	t []time.Time
	v []float64
}

func (s *series) add(t time.Time, v float64) {
	s.t = append(s.t, t)
	s.v = append(s.v, v)
}

// at interpolates the counter linearly at t (clamped to the samples).
func (s *series) at(t time.Time) float64 {
	n := len(s.t)
	if n == 0 {
		return 0
	}
	if !t.After(s.t[0]) {
		return s.v[0]
	}
	for i := 1; i < n; i++ {
		if !t.After(s.t[i]) {
			f := float64(t.Sub(s.t[i-1])) / float64(s.t[i].Sub(s.t[i-1]))
			return s.v[i-1] + f*(s.v[i]-s.v[i-1])
		}
	}
	return s.v[n-1]
}

// during is the counter's increase over [from, to].
func (s *series) during(from, to time.Time) float64 { return s.at(to) - s.at(from) }
