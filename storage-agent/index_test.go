package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops/synth"
)

// TestIndexCommand: the built binary's "storage-agent index" indexes a
// folder of images, logs its progress (a short --progress), writes the
// index file the agent would use and prints a summary; run again, it
// reuses every hash.
func TestIndexCommand(t *testing.T) {
	bin := testutil.Binary(t, "storage-agent")
	data := t.TempDir()
	const n = 200
	var bases [7][]byte // encoding once each keeps the test fast under -race
	for i := range bases {
		b, err := synth.JPEG(uint64(i), 320, 240, synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		bases[i] = b
	}
	for i := range n {
		img := append(slices.Clone(bases[i%7]), byte(i), byte(i>>8)) // distinct files, still JPEGs
		name := filepath.Join(data, fmt.Sprint("class", i%3), fmt.Sprintf("%04d.jpg", i))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, img, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	index := filepath.Join(t.TempDir(), "ds.idx")
	run := func() (string, string) {
		var out, errs bytes.Buffer
		cmd := exec.Command(bin, "index", "--data", data, "--index", index, "--workers", "1", "--progress", "1ms", "--log-format", "json")
		cmd.Stdout, cmd.Stderr = &out, &errs
		if err := cmd.Run(); err != nil {
			t.Fatalf("storage-agent index: %v\nstdout %s\nstderr %s", err, out.String(), errs.String())
		}
		return out.String(), errs.String()
	}
	out, errs := run()
	if !strings.Contains(out, fmt.Sprintf("%d samples (0 missing), 3 classes", n)) || !strings.Contains(out, fmt.Sprintf("hashed %d, reused 0 from the index %s", n, index)) {
		t.Errorf("summary:\n%s", out)
	}
	if !strings.Contains(errs, `"message":"indexing progress"`) || !strings.Contains(errs, `"files_per_s"`) || !strings.Contains(errs, `"eta"`) {
		t.Errorf("no progress lines in the log:\n%s", errs)
	}
	if testing.Verbose() {
		t.Logf("%d progress lines", strings.Count(errs, "indexing progress"))
	}
	if _, err := os.Stat(index); err != nil {
		t.Errorf("index file not written: %v", err)
	}
	if out, _ := run(); !strings.Contains(out, fmt.Sprintf("hashed 0, reused %d", n)) {
		t.Errorf("second run does not reuse the index:\n%s", out)
	}
	// Errors: no --data, and a folder that is no dataset.
	for _, args := range [][]string{{"index"}, {"index", "--data", t.TempDir()}} {
		if err := exec.Command(bin, args...).Run(); err == nil {
			t.Errorf("storage-agent %v: exit 0, want a failure", args)
		}
	}
}
