package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops/synth"
)

// buildAgents returns both binaries (built once per go test run); dir is
// unused.
func buildAgents(t *testing.T, _ string) (compute, storage string) {
	t.Helper()
	return testutil.Binary(t, "compute-agent"), testutil.Binary(t, "storage-agent")
}

// startStorageBin serves a small generated dataset with the storage-agent
// binary (with --cpus 1 unless extra flags say otherwise) until the test
// ends, and returns its address.
func startStorageBin(t *testing.T, storage, dir string, n int, extra ...string) string {
	t.Helper()
	data := filepath.Join(dir, "data")
	for i := range n {
		class := filepath.Join(data, fmt.Sprintf("c%d", i%2))
		if err := os.MkdirAll(class, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := synth.JPEG(uint64(i), 48+4*i, 40, synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(class, fmt.Sprintf("%02d.jpg", i)), string(b))
	}
	addr := testutil.FreeAddr(t)
	var logs bytes.Buffer
	srv := exec.Command(storage, append([]string{"--data", data, "--listen", addr, "--cpus", "1", "--insecure"}, extra...)...)
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		if err := srv.Wait(); err != nil {
			t.Errorf("storage agent (SIGTERM should exit 0): %v\n%s", err, logs.String())
		}
	})
	return addr
}

// readSamples parses a --samples-out file into epoch -> sample -> sha,
// failing on a malformed line or a sample twice in an epoch.
func readSamples(t *testing.T, path string) map[uint64]map[uint64]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[uint64]map[uint64]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var epoch, sample uint64
		var sha string
		if _, err := fmt.Sscanf(line, "%d %d %s", &epoch, &sample, &sha); err != nil || len(sha) != 64 {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
		if m[epoch] == nil {
			m[epoch] = map[uint64]string{}
		}
		if _, dup := m[epoch][sample]; dup {
			t.Errorf("%s: epoch %d sample %d twice", path, epoch, sample)
		}
		m[epoch][sample] = sha
	}
	return m
}

// waitLines waits until path has at least n lines.
func waitLines(t *testing.T, path string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(path); bytes.Count(b, []byte("\n")) >= n {
			return
		}
	}
	t.Fatalf("%s: fewer than %d lines after 30 s", path, n)
}

// TestKillResume: a compute agent killed with SIGKILL mid-epoch and rerun
// with the same --state-dir delivers, over both runs, every sample exactly
// once per epoch, with a clean run's tensors; a mismatching rerun is
// refused; SIGTERM stops the agent with exit status 0 and an
// "interrupted" report line.
func TestKillResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	compute, storage := buildAgents(t, dir)
	const n, epochs = 40, 3
	addr := startStorageBin(t, storage, dir, n)
	args := func(extra ...string) []string {
		return append([]string{"--storage", addr, "--pipeline", "imagenet-train", "--epochs", fmt.Sprint(epochs), "--seed", "5",
			"--batch", "4", "--window", "4", "--gpu", "sim:step=15ms", "--progress", "0", "--log-format", "json", "--insecure"}, extra...)
	}

	clean := filepath.Join(dir, "clean.txt")
	if out, err := exec.Command(compute, args("--samples-out", clean)...).CombinedOutput(); err != nil {
		t.Fatalf("clean run: %v\n%s", err, out)
	}
	want := readSamples(t, clean)

	state, samples, reportPath := filepath.Join(dir, "state"), filepath.Join(dir, "samples.txt"), filepath.Join(dir, "report.jsonl")
	run := args("--state-dir", state, "--samples-out", samples, "--report", reportPath)
	cmd := exec.Command(compute, run...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitLines(t, samples, n+n/2+2) // mid-way through epoch 1
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// Another run's flags on the same state are refused.
	out, err := exec.Command(compute, append(args("--state-dir", state, "--samples-out", samples), "--seed", "6")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another run") {
		t.Errorf("mismatching rerun: %v, want refused\n%s", err, out)
	}

	if out, err := exec.Command(compute, run...).CombinedOutput(); err != nil {
		t.Fatalf("resumed run: %v\n%s", err, out)
	}
	got := readSamples(t, samples)
	for e := range uint64(epochs) {
		if len(got[e]) != n {
			t.Errorf("epoch %d: %d samples over both runs, want %d", e, len(got[e]), n)
		}
		for s, sha := range want[e] {
			if got[e][s] != sha {
				t.Errorf("epoch %d sample %d: sha %.8s, want the clean run's %.8s", e, s, got[e][s], sha)
			}
		}
	}
	reports, err := report.ReadReport(reportPath)
	if err != nil {
		t.Fatal(err)
	}
	var resumed int
	for _, r := range reports {
		resumed += r.Resumed
		// Every complete epoch's report counts the whole epoch, the
		// samples of the killed life included.
		if r.Status == "ok" && (r.EpochSamples != n || r.EpochShard != n || r.EpochSamples != r.Samples+r.Resumed || r.Shard != n-r.Resumed) {
			t.Errorf("epoch %d: %d delivered of %d (%d resumed): epoch_samples %d, epoch_shard %d, want %d", r.Epoch, r.Samples, r.Shard, r.Resumed, r.EpochSamples, r.EpochShard, n)
		}
	}
	if resumed == 0 {
		t.Errorf("no report says an epoch resumed: %+v", reports)
	}

	// SIGTERM: a clean stop, exit status 0, the epoch reported interrupted.
	sigReport, sigSamples := filepath.Join(dir, "sig.jsonl"), filepath.Join(dir, "sig.txt")
	cmd = exec.Command(compute, append(args("--report", sigReport, "--samples-out", sigSamples), "--epochs", "1000")...)
	logs.Reset()
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitLines(t, sigSamples, n/2)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("SIGTERM: %v, want exit status 0\n%s", err, logs.String())
	}
	reports, err = report.ReadReport(sigReport)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) == 0 || reports[len(reports)-1].Status != "interrupted" {
		t.Errorf("after SIGTERM: reports %+v, want the last one interrupted", reports)
	}
}
