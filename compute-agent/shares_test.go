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
// (1.5 and 0.5 cores, told in Info, in its report) while both run, and
// both deliver every sample exactly once per epoch, with the same tensors
// (one seed).
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
		// Every epoch is planned for the job's share of the two, or, the
		// other job not yet started or already gone (a finished job leaves
		// the shares at once), for the whole budget; at least one for the
		// share: they ran side by side.
		shared := 0
		for _, r := range reports {
			both := math.Abs(r.ShareCPUs-j.share) <= 1e-9 && r.Jobs == 2
			alone := r.ShareCPUs == 2 && r.Jobs == 1
			if r.Job != j.name || !both && !alone {
				t.Errorf("job %s epoch %d: job %q share %v cores of %d jobs, want share %v of 2 jobs or 2 of 1\n%s", j.name, r.Epoch, r.Job, r.ShareCPUs, r.Jobs, j.share, outs[i])
			}
			if both {
				shared++
			}
		}
		if shared == 0 {
			t.Errorf("job %s: no epoch planned for its share of the two jobs\n%s", j.name, outs[i])
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

// TestJobLeavesOnExit: a job that ends tells the storage agent it is
// leaving, so that the next job, started right after, is told the whole
// budget rather than half of it for the agent's job window (30 s).
func TestJobLeavesOnExit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	dir := t.TempDir()
	compute, storage := buildAgents(t, dir)
	const n = 16
	addr := startStorageBin(t, storage, dir, n, "--cpus", "2")
	for _, job := range []string{"first", "second"} {
		jd := filepath.Join(dir, job)
		cmd := exec.Command(compute, "--storage", addr, "--pipeline", "imagenet-train", "--epochs", "1", "--seed", "5",
			"--batch", "4", "--gpu", "sim:step=1ms", "--progress", "0", "--log-format", "json", "--insecure", "--job", job,
			"--policy", "sophon", "--profile-budget", "500ms",
			"--samples-out", jd+"-samples.txt", "--report", jd+"-report.jsonl")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("job %s: %v\n%s", job, err, out)
		}
		reports, err := report.ReadReport(jd + "-report.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		if len(reports) != 1 || reports[0].Samples != n {
			t.Fatalf("job %s: %+v, want one epoch of %d samples", job, reports, n)
		}
		if r := reports[0]; r.Job != job || r.Jobs != 1 || r.ShareCPUs != 2 {
			t.Errorf("job %s: share %v cores of %d jobs, want the whole 2 of 1 job (the job before it left)\n%s", job, r.ShareCPUs, r.Jobs, out)
		}
	}
}
