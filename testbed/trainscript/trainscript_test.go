package trainscript

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadOut: the step lines with a loss, in order, and the summary line;
// other lines (the client's logs, steps without a loss) are skipped.
func TestReadOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "train.out")
	text := `loading...
{"epoch": 0, "step": 0, "batch": 16, "loss": 2.5, "images": 16}
{"epoch": 0, "step": 1, "batch": 16, "loss": null, "images": 32}
not json {
{"epoch": 1, "step": 2, "batch": 16, "loss": 2.25, "images": 48}
{"summary": true, "images": 48, "steps": 3, "seconds": 2, "images_per_s": 24, "wait_s": 0.5}
`
	if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	steps, sum, err := ReadOut(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[1].Epoch != 1 || steps[1].Step != 2 || *steps[1].Loss != 2.25 {
		t.Errorf("steps %+v, want the two with a loss", steps)
	}
	if sum == nil || sum.Images != 48 || sum.Steps != 3 || sum.ImagesPerSec == nil || *sum.ImagesPerSec != 24 || sum.WaitSeconds != 0.5 {
		t.Errorf("summary %+v", sum)
	}
	if got := FirstLosses(steps, 1); !slices.Equal(got, []float64{2.5}) {
		t.Errorf("first loss %v, want [2.5]", got)
	}
	if got := FirstLosses(steps, 10); !slices.Equal(got, []float64{2.5, 2.25}) {
		t.Errorf("first losses %v, want [2.5 2.25]", got)
	}

	if err := os.WriteFile(out, []byte(text[:strings.Index(text, `{"summary"`)]), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, sum, err := ReadOut(out); err != nil || sum != nil {
		t.Errorf("no summary line: %+v, %v; want nil", sum, err)
	}
}

// TestFind: a given path as given, else the script above the binaries'
// folder; an error naming the script where there is none.
func TestFind(t *testing.T) {
	repo := t.TempDir()
	script := filepath.Join(repo, Script)
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Find("", filepath.Join(repo, "bin")); err != nil || got != script {
		t.Errorf("from bin/: %q, %v; want %q", got, err, script)
	}
	if got, err := Find(script, ""); err != nil || got != script {
		t.Errorf("given: %q, %v; want %q", got, err, script)
	}
	if _, err := Find(filepath.Join(repo, "missing.py"), ""); err == nil {
		t.Error("a given path that does not exist: no error")
	}
	t.Chdir(t.TempDir())
	if _, err := Find("", t.TempDir()); err == nil || !strings.Contains(err.Error(), Script) {
		t.Errorf("nowhere: %v, want an error naming %s", err, Script)
	}
	if got := PythonPath(script); got != filepath.Join(repo, "python") {
		t.Errorf("PYTHONPATH %q, want %q", got, filepath.Join(repo, "python"))
	}
}

// TestSocket: the socket in dir, or in a temporary folder when dir's path
// is too long for a Unix socket.
func TestSocket(t *testing.T) {
	dir := t.TempDir()
	p, cleanup, err := Socket(dir)
	if err != nil || p != filepath.Join(dir, "trainer.sock") {
		t.Errorf("short dir: %q, %v", p, err)
	}
	cleanup()
	long := filepath.Join(dir, strings.Repeat("d", 100))
	p, cleanup, err = Socket(long)
	if err != nil || len(p) >= 100 || filepath.Base(p) != "trainer.sock" {
		t.Errorf("long dir: %q, %v; want a short path", p, err)
	}
	cleanup()
	if _, err := os.Stat(filepath.Dir(p)); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s: %v", filepath.Dir(p), err)
	}
}
