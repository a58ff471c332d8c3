package testbed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
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
)

// The fault suite: the real binaries on loopback, faults injected with
// signals. `make test` runs a short version; `make reliability` sets
// SOPHON_RELIABILITY=full for the counts of docs/reliability.md and
// SOPHON_RELIABILITY_OUT to a file that receives the figures as JSON lines.

// faultCounts are how many faults of each kind a run injects.
type faultCounts struct {
	restarts     int           // storage-agent kill -9 and restart cycles
	maxGap       time.Duration // longest restart gap (the shortest is 0.5 s)
	stops        int           // SIGSTOPs of one of two replicas
	stopFor      time.Duration // how long each lasts
	computeKills int           // compute-agent kill -9 and resume cycles
}

func reliabilityCounts() faultCounts {
	if os.Getenv("SOPHON_RELIABILITY") == "full" {
		return faultCounts{restarts: 30, maxGap: 10 * time.Second, stops: 10, stopFor: 20 * time.Second, computeKills: 10}
	}
	return faultCounts{restarts: 2, maxGap: 2 * time.Second, stops: 1, stopFor: 5 * time.Second, computeKills: 2}
}

// recordFigures appends one JSON line to SOPHON_RELIABILITY_OUT, if set.
func recordFigures(t *testing.T, v map[string]any) {
	t.Helper()
	v["test"] = t.Name()
	v["when"] = time.Now().UTC().Format(time.RFC3339)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("figures: %s", b)
	out := os.Getenv("SOPHON_RELIABILITY_OUT")
	if out == "" {
		return
	}
	f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// faultSamples is the size of the fault runs' dataset: 2 s epochs at a
// simulated 60 img/s.
const faultSamples = 120

// imageSets holds the ImageNet-like ImageFolders written for this test
// binary, by size, in its scratch directory: written once each.
var imageSets struct {
	sync.Mutex
	dirs map[int]string
}

// imageSet is an ImageNet-like ImageFolder of n JPEGs in 4 classes (seed
// 11), written once per test binary.
func imageSet(t *testing.T, n int) string {
	t.Helper()
	imageSets.Lock()
	defer imageSets.Unlock()
	if d, ok := imageSets.dirs[n]; ok {
		return d
	}
	d := filepath.Join(scratch(t), fmt.Sprintf("images-%d", n))
	if _, err := synth.WriteImageFolder(d, synth.ImageNetLike, 11, n, 4); err != nil {
		t.Fatal(err)
	}
	if imageSets.dirs == nil {
		imageSets.dirs = map[int]string{}
	}
	imageSets.dirs[n] = d
	return d
}

// faultData is the fault runs' ImageFolder of faultSamples JPEGs.
func faultData(t *testing.T) string { return imageSet(t, faultSamples) }

// storageProc is a storage agent the test kills, stops and restarts on the
// same address.
type storageProc struct {
	t    *testing.T
	bin  string
	args []string
	addr string
	p    *proc
}

func newStorageProc(t *testing.T, bins agentBinaries, data string) *storageProc {
	addr := testutil.FreeAddr(t)
	s := &storageProc{t: t, bin: bins.storage, addr: addr,
		args: append([]string{"--data", data, "--listen", addr, "--cpus", "1", "--log-level", "warn"}, faultCerts(t).storage...)}
	s.start()
	return s
}

func (s *storageProc) start() {
	s.t.Helper()
	s.p = start(s.t, command(context.Background(), s.bin, s.args...))
	s.p.waitListening(s.t, func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "tcp", s.addr) })
}

func (s *storageProc) kill() {
	syscall.Kill(-s.p.cmd.Process.Pid, syscall.SIGKILL)
	<-s.p.done
}

func (s *storageProc) signal(sig syscall.Signal) { syscall.Kill(-s.p.cmd.Process.Pid, sig) }

// delivery is one line of a compute agent's sample log.
type delivery struct {
	epoch, sample uint64
	sha           string
}

// readSamples reads a sample log (--samples-out): "epoch sample sha" per
// line.
func readSamples(t *testing.T, path string) []delivery {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []delivery
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			t.Fatalf("sample log line %q", sc.Text())
		}
		e, err1 := strconv.ParseUint(fs[0], 10, 64)
		s, err2 := strconv.ParseUint(fs[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("sample log line %q", sc.Text())
		}
		out = append(out, delivery{e, s, fs[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkExactlyOnce fails t unless got holds every (epoch, sample) of want
// once, with want's hash.
func checkExactlyOnce(t *testing.T, got, want []delivery) {
	t.Helper()
	type key struct{ e, s uint64 }
	ref := map[key]string{}
	for _, d := range want {
		ref[key{d.epoch, d.sample}] = d.sha
	}
	seen := map[key]bool{}
	for _, d := range got {
		k := key{d.epoch, d.sample}
		sha, ok := ref[k]
		switch {
		case !ok:
			t.Fatalf("epoch %d sample %d delivered but not in the clean run", d.epoch, d.sample)
		case seen[k]:
			t.Fatalf("epoch %d sample %d delivered twice", d.epoch, d.sample)
		case sha != d.sha:
			t.Fatalf("epoch %d sample %d: hash %s, clean run %s", d.epoch, d.sample, d.sha, sha)
		}
		seen[k] = true
	}
	if len(seen) != len(ref) {
		t.Fatalf("%d (epoch, sample) pairs delivered, the clean run has %d", len(seen), len(ref))
	}
}

// agentFlags are the TLS flags of the fault runs' agents: as deployed,
// mutual TLS with a development CA.
type agentFlags struct{ storage, compute []string }

var (
	certsOnce sync.Once
	certs     agentFlags
	certsErr  error
)

func faultCerts(t *testing.T) agentFlags {
	t.Helper()
	certsOnce.Do(func() {
		certs.storage, certs.compute, certsErr = AgentCerts(filepath.Join(scratch(t), "fault-certs"))
	})
	if certsErr != nil {
		t.Fatal(certsErr)
	}
	return certs
}

// computeArgs are a fault run's compute-agent flags.
func computeArgs(t *testing.T, dir string, epochs int, gpu string, storage ...string) []string {
	return append([]string{"--storage", strings.Join(storage, ","), "--epochs", strconv.Itoa(epochs), "--seed", "7",
		"--plan", "resizeoff", "--batch", "16", "--gpu", gpu, "--log-level", "warn",
		"--report", filepath.Join(dir, "epochs.jsonl"), "--samples-out", filepath.Join(dir, "samples.txt")}, faultCerts(t).compute...)
}

// cleanRun runs the compute agent with no fault and returns its sample
// log: the reference every fault run must match.
func cleanRun(t *testing.T, bins agentBinaries, epochs int, storage string) []delivery {
	t.Helper()
	dir := t.TempDir()
	args := computeArgs(t, dir, epochs, "sim:100000", storage)
	runCompute(t, command(context.Background(), bins.compute, args...), filepath.Join(dir, "epochs.jsonl"), nil)
	return readSamples(t, filepath.Join(dir, "samples.txt"))
}

// TestFaultStorageRestarts kills the storage agent with SIGKILL and
// restarts it on the same address, after gaps of 0.5 s up to maxGap, while
// a compute agent runs: the run must finish, every epoch exactly once with
// the clean run's hashes.
func TestFaultStorageRestarts(t *testing.T) {
	bins := buildAgents(t)
	n := reliabilityCounts()
	st := newStorageProc(t, bins, faultData(t))
	// A simulated GPU at 60 img/s: 2 s epochs, so faults land mid-epoch.
	budget := time.Duration(n.restarts) * (n.maxGap/2 + 2*time.Second)
	epochs := int(budget/(2*time.Second)) + 2
	want := cleanRun(t, bins, epochs, st.addr)

	dir := t.TempDir()
	cmd := command(context.Background(), bins.compute, computeArgs(t, dir, epochs, "sim:60", st.addr)...)
	rng := rand.New(rand.NewPCG(1, 2))
	var gaps []float64
	next := time.Now().Add(time.Second)
	run := runCompute(t, cmd, filepath.Join(dir, "epochs.jsonl"), func() {
		if len(gaps) == n.restarts || time.Now().Before(next) {
			return
		}
		gap := 500*time.Millisecond + time.Duration(rng.Int64N(int64(n.maxGap-500*time.Millisecond)+1))
		st.kill()
		time.Sleep(gap)
		st.start()
		gaps = append(gaps, gap.Seconds())
		next = time.Now().Add(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
	})
	if len(gaps) < n.restarts {
		t.Fatalf("the run ended after %d of %d restarts: make it longer", len(gaps), n.restarts)
	}
	checkExactlyOnce(t, readSamples(t, filepath.Join(dir, "samples.txt")), want)
	var slowest float64
	for _, e := range run.epochs {
		slowest = max(slowest, e.Seconds)
	}
	recordFigures(t, map[string]any{"restarts": len(gaps), "gaps_s": gaps, "epochs": len(run.epochs),
		"wall_s": run.wall.Seconds(), "slowest_epoch_s": slowest, "exactly_once": true})
}

// TestFaultStalledReplica freezes one of two replicas with SIGSTOP for
// stopFor, during epochs, and lets it go on (SIGCONT): epochs that saw the
// stall may take at most twice a clean epoch.
func TestFaultStalledReplica(t *testing.T) {
	bins := buildAgents(t)
	n := reliabilityCounts()
	// 4 s epochs at 30 img/s.
	a := newStorageProc(t, bins, faultData(t))
	b := newStorageProc(t, bins, faultData(t))
	const clean = 2 // epochs before the first stop
	per := n.stopFor + 4*time.Second
	epochs := clean + int(time.Duration(n.stops)*per/(4*time.Second)) + 1
	want := cleanRun(t, bins, epochs, a.addr)

	dir := t.TempDir()
	cmd := command(context.Background(), bins.compute, computeArgs(t, dir, epochs, "sim:30", a.addr, b.addr)...)
	type window struct{ from, to time.Time }
	var stops []window
	var stopped bool
	var next time.Time
	reportPath := filepath.Join(dir, "epochs.jsonl")
	run := runCompute(t, cmd, reportPath, func() {
		now := time.Now()
		switch {
		case stopped && now.After(next):
			a.signal(syscall.SIGCONT)
			stopped = false
			stops[len(stops)-1].to = now
			next = now.Add(4 * time.Second)
		case !stopped && len(stops) < n.stops && !next.IsZero() && now.After(next):
			a.signal(syscall.SIGSTOP)
			stopped = true
			stops = append(stops, window{from: now})
			next = now.Add(n.stopFor)
		case next.IsZero():
			if reps, _ := report.ReadReport(reportPath); len(reps) >= clean {
				next = now // the clean epochs are done
			}
		}
	})
	if stopped {
		a.signal(syscall.SIGCONT)
	}
	if len(stops) < n.stops {
		t.Fatalf("the run ended after %d of %d stops: make it longer", len(stops), n.stops)
	}
	checkExactlyOnce(t, readSamples(t, filepath.Join(dir, "samples.txt")), want)
	var cleanMax float64
	for _, e := range run.epochs[:clean] {
		cleanMax = max(cleanMax, e.Seconds)
	}
	var worst float64
	var hit int
	for _, e := range run.epochs[clean:] {
		overlaps := false
		for _, w := range stops {
			if e.start().Before(w.to) && e.end().After(w.from) {
				overlaps = true
			}
		}
		if !overlaps {
			continue
		}
		hit++
		worst = max(worst, e.Seconds)
	}
	ratio := worst / cleanMax
	recordFigures(t, map[string]any{"stops": len(stops), "stop_s": n.stopFor.Seconds(), "clean_epoch_s": cleanMax,
		"stalled_epochs": hit, "worst_stalled_epoch_s": worst, "ratio": ratio, "exactly_once": true})
	if hit == 0 {
		t.Fatal("no epoch overlapped a stop")
	}
	if ratio > 2 {
		t.Errorf("an epoch with a stalled replica took %.2f s, %.2fx the slowest clean epoch (%.2f s); want at most 2x", worst, ratio, cleanMax)
	}
}

// TestFaultComputeKillResume kills the compute agent with SIGKILL at a
// random point and reruns it with the same --state-dir, computeKills
// times: over all its lives the sample log holds every epoch's samples
// exactly once with the clean run's hashes.
func TestFaultComputeKillResume(t *testing.T) {
	bins := buildAgents(t)
	n := reliabilityCounts()
	st := newStorageProc(t, bins, faultData(t))
	epochs := 2 * (n.computeKills + 1) // 2 s each at 60 img/s
	want := cleanRun(t, bins, epochs, st.addr)

	dir := t.TempDir()
	args := append(computeArgs(t, dir, epochs, "sim:60", st.addr), "--state-dir", filepath.Join(dir, "state"))
	rng := rand.New(rand.NewPCG(3, 4))
	var lives []float64
	for kill := 0; ; kill++ {
		cmd := command(context.Background(), bins.compute, args...)
		logs := &testutil.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		began := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if kill == n.computeKills {
			if err := <-done; err != nil {
				t.Fatalf("last life: %v\n%s", err, logs.String())
			}
			break
		}
		life := time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
		select {
		case err := <-done:
			t.Fatalf("life %d ended before its kill: %v\n%s", kill, err, logs.String())
		case <-time.After(life):
		}
		// NB: the kill lands inside an epoch, so that the next life has one
		// to resume: a fixed life can fall between two epochs as start-up
		// and epoch times move.
		waitMidEpoch(filepath.Join(dir, "samples.txt"), faultSamples, done)
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		lives = append(lives, time.Since(began).Seconds())
	}
	checkExactlyOnce(t, readSamples(t, filepath.Join(dir, "samples.txt")), want)
	reps, err := report.ReadReport(filepath.Join(dir, "epochs.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var resumed int
	for _, r := range reps {
		if r.Resumed > 0 {
			resumed++
		}
	}
	recordFigures(t, map[string]any{"kills": len(lives), "lives_s": lives, "epochs": epochs,
		"resumed_epochs": resumed, "exactly_once": true})
	if resumed == 0 {
		t.Errorf("no report says an epoch resumed after %d kills", len(lives))
	}
}

// waitMidEpoch waits, for at most 15 s or until done has a value, until
// the sample log at path holds a count of lines between a quarter and
// three quarters of an epoch of perEpoch samples past its last full one:
// a compute agent killed then leaves an epoch to resume. An error read
// from done is put back for the caller.
func waitMidEpoch(path string, perEpoch int, done chan error) {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			done <- err
			return
		default:
		}
		if b, err := os.ReadFile(path); err == nil {
			at := bytes.Count(b, []byte("\n")) % perEpoch
			if at >= perEpoch/4 && at <= 3*perEpoch/4 {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}
