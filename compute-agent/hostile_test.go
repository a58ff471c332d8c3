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

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/internal/errkind"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/ops/synth"
)

// rssLimit is the peak resident set the compute agent must stay under
// while it decodes the hostile corpus.
const rssLimit = 256 << 20

// TestHostileCorpusBinary runs the two binaries as an operator does, the
// storage agent serving the hostile corpus (ops/hostile) and good samples
// raw, the compute agent finishing them under --plan nooff --on-error skip
// with its default limits (the storage agent's): every file the corpus says
// a decode refuses fails with its typed error and its path, every other one
// is delivered, and the compute agent's peak RSS (its rusage maxrss at
// exit, VmHWM) stays under 256 MiB.
func TestHostileCorpusBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	compute, storage := testutil.Binary(t, "compute-agent"), testutil.Binary(t, "storage-agent")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	corpus := hostile.Corpus()
	want := map[string]string{} // path -> kind, "" for delivered
	write := func(rel string, b []byte) {
		name := filepath.Join(data, rel)
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range corpus {
		rel := fmt.Sprintf("hostile/%03d.jpg", i)
		write(rel, c.Data)
		want[rel] = ""
		if c.Want != nil {
			want[rel] = errkind.Name(errkind.Of(c.Want))
		}
	}
	const good = 32
	for i := range good {
		b, err := synth.JPEG(uint64(i), 320+8*i, 240, synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rel := fmt.Sprintf("good/%03d.jpg", i)
		write(rel, b)
		want[rel] = ""
	}

	addr := testutil.FreeAddr(t)
	var slogs bytes.Buffer
	srv := exec.Command(storage, "--data", data, "--listen", addr, "--cpus", "1", "--insecure", "--index", "-", "--log-format", "json")
	srv.Stdout, srv.Stderr = &slogs, &slogs
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		_ = srv.Wait()
	}()
	waitListening(t, addr, &slogs)

	reportPath := filepath.Join(dir, "report.jsonl")
	cmd := exec.Command(compute, "--storage", addr, "--insecure", "--pipeline", "imagenet-train", "--plan", "nooff",
		"--on-error", "skip", "--workers", "2", "--batch", "8", "--gpu", "sim:step=1ms", "--report", reportPath, "--log-format", "json")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("compute agent: %v\n%s", err, out)
	}
	reports, err := report.ReadReport(reportPath)
	if err != nil || len(reports) != 1 {
		t.Fatalf("report: %v, %d lines\n%s", err, len(reports), out)
	}
	r := reports[0]
	got := map[string]string{}
	for _, f := range r.Failed {
		if f.Path == "" || f.Where != "local" || !strings.HasPrefix(f.Message, "sample ") {
			t.Errorf("failure %+v: want a local, typed failure naming its file", f)
		}
		got[f.Path] = f.Kind
	}
	refused := 0
	for path, kind := range want {
		if kind != "" {
			refused++
		}
		if got[path] != kind {
			t.Errorf("%s: failed with %q, want %q (\"\": delivered)", path, got[path], kind)
		}
	}
	if r.SamplesFailed != refused || r.Samples != len(want)-refused {
		t.Errorf("report: %d delivered, %d failed; want %d and %d", r.Samples, r.SamplesFailed, len(want)-refused, refused)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		t.Fatal("no rusage")
	}
	peak := ru.Maxrss << 10 // kB on Linux
	t.Logf("compute agent: %d samples, %d refused, peak RSS %.1f MiB, %.2f s CPU", r.Samples, refused, float64(peak)/(1<<20),
		(time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())).Seconds())
	if peak >= rssLimit {
		t.Errorf("peak RSS %d MiB, want under %d MiB", peak>>20, rssLimit>>20)
	}
}
