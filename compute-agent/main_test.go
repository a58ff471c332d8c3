package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/ops/synth"
)

// TestBinaries runs the two agents' binaries: an epoch between them on
// loopback with mutual TLS, a config file, a spec file and a plan file.
func TestBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	compute, storage := testutil.Binary(t, "compute-agent"), testutil.Binary(t, "storage-agent")
	dir := t.TempDir()

	if out, err := exec.Command(compute, "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "Example:") || !strings.Contains(string(out), "-strict-order") ||
		!strings.Contains(string(out), "-policy") || !strings.Contains(string(out), "-replan-threshold") || !strings.Contains(string(out), "-cache-dir") {
		t.Errorf("--help: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"--bogus"},
		{"--storage", "127.0.0.1:1", "--plan", "sideways"},
		{"--storage", "127.0.0.1:1", "--gpu", "tpu"},
		{"--storage", "127.0.0.1:1", "--on-error", "shrug"},
		{"--storage", "127.0.0.1:1", "--policy", "greedy"},
		{"--storage", "127.0.0.1:1", "--recv-window", "1000"},
		{"--storage", "127.0.0.1:1", "--policy", "sophon", "--fetch-only"},
		{"--pipeline", "imagenet-train"},
		{"--storage", "127.0.0.1:1", "--cache-dir", "x"},
		{"--storage", "127.0.0.1:1", "--cache-bytes", "lots"},
		{"--storage", "127.0.0.1:1", "--cache-dir", "x", "--cache-bytes", "1MiB", "--cache-policy", "fifo"},
	} {
		err := exec.Command(compute, args...).Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("%v: got %v, want exit status 2", args, err)
		}
	}

	// Without certificates the default start refuses, saying how to get
	// them; with --insecure it warns.
	out, err := exec.Command(compute, "--storage", "127.0.0.1:1", "--pipeline", "imagenet-train").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("no certificates: got %v, want exit status 2\n%s", err, out)
	}
	for _, hint := range []string{"make certs", "compute-agent certs", "--insecure"} {
		if !strings.Contains(string(out), hint) {
			t.Errorf("no certificates: the message lacks %q:\n%s", hint, out)
		}
	}
	out, _ = exec.Command(compute, "--storage", "127.0.0.1:1", "--pipeline", "imagenet-train", "--insecure",
		"--retries", "1", "--log-format", "json").CombinedOutput()
	if !strings.Contains(string(out), `"level":"warn"`) || !strings.Contains(string(out), "INSECURE") {
		t.Errorf("--insecure: no warning:\n%s", out)
	}
	if out, err := exec.Command(compute, "certs", "--out", filepath.Join(dir, "certs"), "--compute", "c1").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "compute-c1.pem") {
		t.Errorf("certs: %v\n%s", err, out)
	}

	data := filepath.Join(dir, "data")
	const n = 24
	for i := range n {
		class := filepath.Join(data, fmt.Sprintf("c%d", i%2))
		if err := os.MkdirAll(class, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := synth.JPEG(uint64(i), 48+4*i, 40, synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(class, fmt.Sprintf("%02d.jpg", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	server, client, err := tlsconf.WriteTestPKI(filepath.Join(dir, "pki"), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	var slogs bytes.Buffer
	srv := exec.Command(storage, "--data", data, "--listen", addr, "--cpus", "1", "--log-format", "json", "--allow-client-specs",
		"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-ca", server.CA)
	srv.Stdout, srv.Stderr = &slogs, &slogs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		if err := srv.Wait(); err != nil {
			t.Errorf("storage agent: %v\n%s", err, slogs.String())
		}
		// The first connection logs its send buffer: set, or why not.
		if !strings.Contains(slogs.String(), `"send_buffer":4194304`) {
			t.Errorf("storage agent: no line on the connections' 4 MiB send buffer:\n%s", slogs.String())
		}
	}()
	waitListening(t, addr, &slogs)

	spec := filepath.Join(dir, "pipeline.yaml")
	writeFile(t, spec, "name: bin-test\nops:\n  - op: decode\n  - op: random_resized_crop\n    size: [32, 32]\n  - op: random_horizontal_flip\n  - op: to_tensor\n  - op: normalize\n    mean: [0.5, 0.5, 0.5]\n    std: [0.25, 0.25, 0.25]\n")
	plan := filepath.Join(dir, "plan.json")
	writeFile(t, plan, `{"default": 2, "splits": {"0": 0, "1": 5, "2": 4}}`)
	reportPath, samplesOut := filepath.Join(dir, "report.jsonl"), filepath.Join(dir, "samples.txt")
	cfgFile := filepath.Join(dir, "compute.yaml")
	// The file's epochs are overridden by the flag.
	writeFile(t, cfgFile, "storage: ["+addr+"]\nepochs: 5\nbatch: 5\nwindow: 4\ngpu: sim:step=1ms\ncodec: zstd\nlog-format: json\n")
	out, err = exec.Command(compute, "--config", cfgFile, "--epochs", "2", "--pipeline", spec, "--plan", plan,
		"--report", reportPath, "--samples-out", samplesOut, "--seed", "3", "--tls-cert", client.Cert, "--tls-key", client.Key, "--tls-ca", client.CA).CombinedOutput()
	if err != nil {
		t.Fatalf("compute agent: %v\n%s", err, out)
	}
	f, err := os.Open(reportPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var reports []report.EpochReport
	for sc.Scan() {
		var r report.EpochReport
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		reports = append(reports, r)
	}
	if len(reports) != 2 {
		t.Fatalf("%d report lines, want 2\n%s", len(reports), out)
	}
	for i, r := range reports {
		splits := map[int]int{}
		for _, s := range r.BySplit {
			splits[s.Split] = s.Samples
		}
		if r.Epoch != uint64(i) || r.Samples != n || r.Batches != 5 || r.BytesReceived <= 0 || splits[0] != 1 || splits[5] != 1 || splits[4] != 1 || splits[2] != n-3 {
			t.Errorf("report %d: %+v", i, r)
		}
		if !strings.HasPrefix(r.Pipeline, "bin-test@") || r.Plan != plan || !strings.HasPrefix(r.GPU.Status, "nvml: ") {
			t.Errorf("report %d: pipeline %q plan %q gpu %q", i, r.Pipeline, r.Plan, r.GPU.Status)
		}
	}

	// --samples-out: every sample once per epoch, with a tensor hash.
	b, err := os.ReadFile(samplesOut)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]uint64]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var epoch, sample uint64
		var sha string
		if _, err := fmt.Sscanf(line, "%d %d %s", &epoch, &sample, &sha); err != nil || len(sha) != 64 || epoch > 1 || sample >= n {
			t.Fatalf("--samples-out line %q: %v", line, err)
		}
		if seen[[2]uint64{epoch, sample}] {
			t.Errorf("--samples-out: epoch %d sample %d twice", epoch, sample)
		}
		seen[[2]uint64{epoch, sample}] = true
	}
	if len(seen) != 2*n {
		t.Errorf("--samples-out: %d (epoch, sample) pairs, want %d", len(seen), 2*n)
	}

	tlsArgs := []string{"--tls-cert", client.Cert, "--tls-key", client.Key, "--tls-ca", client.CA}
	err = exec.Command(compute, append([]string{"--storage", addr, "--pipeline", spec, "--plan", plan, "--policy", "sophon"}, tlsArgs...)...).Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("--policy with --plan FILE: got %v, want exit status 2", err)
	}
	// A policy run: loopback is fast, so stage 2 is forced.
	profile, preport := filepath.Join(dir, "profile.zst"), filepath.Join(dir, "policy.jsonl")
	out, err = exec.Command(compute, append([]string{"--storage", addr, "--pipeline", spec, "--epochs", "2", "--batch", "5",
		"--gpu", "sim:step=1ms", "--policy", "sophon", "--force-profile", "--profile", profile, "--profile-budget", "100ms",
		"--replan-threshold", "0.5", "--report", preport, "--log-format", "json"}, tlsArgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("policy run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "stage 1:") {
		t.Errorf("policy run did not print stage 1's decision:\n%s", out)
	}
	if _, err := os.Stat(profile); err != nil {
		t.Errorf("profile not saved: %v", err)
	}
	b, err = os.ReadFile(preport)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d policy report lines, want 2", len(lines))
	}
	for i, line := range lines {
		var r report.EpochReport
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r.Policy != "sophon" || r.Samples != n || !(r.PredictedSeconds > 0) || (i == 0) != (r.Stage1 != nil) || (i == 1 && !(r.BoundSeconds > 0)) {
			t.Errorf("policy report %d: %s", i, line)
		}
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitListening waits up to 10 s for the storage agent started with logs
// slogs to accept connections on addr.
func waitListening(t *testing.T, addr string, slogs fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("storage agent not listening: %v\n%s", err, slogs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
