package main

import (
	"bytes"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// TestTwoJobsShareStorage: two compute agents of two jobs against one
// storage agent of 2 cores, one job weighted 3: each plans for its share
// (1.5 and 0.5 cores, told in Info, in its report), and both deliver every
// sample exactly once per epoch, with the same tensors (one seed).
func TestTwoJobsShareStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	compute, storage := buildAgents(t, dir)
	const n, epochs = 40, 3
	addr := startStorageBin(t, storage, dir, n, "--cpus", "2", "--job-weights", "big=3")
	jobs := []struct {
		name  string
		share float64
	}{{"big", 1.5}, {"small", 0.5}}
	var wg sync.WaitGroup
	outs := make([][]byte, len(jobs))
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		jd := filepath.Join(dir, j.name)
		wg.Go(func() {
			cmd := exec.Command(compute, "--storage", addr, "--pipeline", "imagenet-train", "--epochs", fmt.Sprint(epochs), "--seed", "5",
				"--batch", "4", "--window", "4", "--gpu", "sim:step=15ms", "--progress", "0", "--log-format", "json", "--insecure",
				"--policy", "sophon", "--profile-budget", "500ms", "--job", j.name,
				"--samples-out", jd+"-samples.txt", "--report", jd+"-report.jsonl")
			var logs bytes.Buffer
			cmd.Stdout, cmd.Stderr = &logs, &logs
			errs[i] = cmd.Run()
			outs[i] = logs.Bytes()
		})
	}
	wg.Wait()
	var samples []map[uint64]map[uint64]string
	for i, j := range jobs {
		if errs[i] != nil {
			t.Fatalf("job %s: %v\n%s", j.name, errs[i], outs[i])
		}
		got := readSamples(t, filepath.Join(dir, j.name+"-samples.txt"))
		for e := range uint64(epochs) {
			if len(got[e]) != n {
				t.Errorf("job %s epoch %d: %d samples, want each of %d once", j.name, e, len(got[e]), n)
			}
		}
		samples = append(samples, got)
		reports, err := report.ReadReport(filepath.Join(dir, j.name+"-report.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if len(reports) != epochs {
			t.Fatalf("job %s: %d report lines, want %d", j.name, len(reports), epochs)
		}
		// The first epoch may have been planned before the other job
		// asked; the last is planned with both active.
		last := reports[len(reports)-1]
		if last.Job != j.name || math.Abs(last.ShareCPUs-j.share) > 1e-9 || last.Jobs != 2 {
			t.Errorf("job %s last epoch: job %q share %v cores of %d jobs, want share %v of 2 jobs\n%s", j.name, last.Job, last.ShareCPUs, last.Jobs, j.share, outs[i])
		}
	}
	for e := range uint64(epochs) {
		for s, sha := range samples[0][e] {
			if samples[1][e][s] != sha {
				t.Errorf("epoch %d sample %d: job big got %s, job small %s", e, s, sha, samples[1][e][s])
			}
		}
	}
}
