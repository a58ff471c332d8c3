package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/policy/synthetic"
	"github.com/sophon-dl/sophon/profiler"
)

func TestExplain(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"explain", "--synthetic", "openimages-like:500", "--link-mbit", "430", "--storage-cores", "8"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"nooff", "alloff", "resizeoff", "fastflow", "sophon", "optimal", "bound", "500 samples",
		"samples per split", "2 random_resized_crop"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The synthetic profile has the cut and optimal uses it; the baselines
	// never do. --cut=false takes it away.
	if got := cutColumn(t, out.String()); got["optimal"] == 0 || got["sophon"] != 0 || got["nooff"] != 0 {
		t.Errorf("cut column %v: want optimal > 0, sophon and nooff 0\n%s", got, out.String())
	}
	out.Reset()
	code = run([]string{"explain", "--synthetic", "openimages-like:500", "--link-mbit", "430", "--storage-cores", "8", "--cut=false"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("--cut=false: exit %d: %s", code, errOut.String())
	}
	if got := cutColumn(t, out.String()); got["optimal"] != 0 || !strings.Contains(out.String(), "0 samples with a JPEG cut") {
		t.Errorf("--cut=false: cut column %v, want 0\n%s", got, out.String())
	}
	// A saved profile explains the same way.
	path := filepath.Join(t.TempDir(), "p.prof")
	if err := profiler.Save(path, synthetic.Profile("imagenet-like", 200, 3)); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"explain", "--profile", path}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "200 samples") {
		t.Errorf("explain of a saved profile: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

func TestExplainErrors(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"plan"},
		{"explain"},
		{"explain", "--synthetic", "cats:10"},
		{"explain", "--synthetic", "openimages-like:0"},
		{"explain", "--synthetic", "openimages-like:5", "--profile", "x"},
		{"explain", "--profile", filepath.Join(t.TempDir(), "missing")},
		{"explain", "--bogus"},
		{"explain", "--estimate", filepath.Join(t.TempDir(), "missing")},
		{"explain", "--estimate", t.TempDir()},
		{"explain", "--estimate", t.TempDir(), "--synthetic", "openimages-like:5"},
		{"explain", "--estimate", t.TempDir(), "--pipeline", "no-such-preset"},
		{"explain", "--synthetic", "openimages-like:5", "--pipeline", "imagenet-train-q42"},
		{"explain", "--synthetic", "openimages-like:5", "--pipeline", "imagenet-train-fast"},
		{"explain", "--synthetic", "openimages-like:5", "--cache-bytes", "120%"},
		{"explain", "--synthetic", "openimages-like:5", "--cache-bytes", "lots"},
		{"explain", "--synthetic", "openimages-like:5", "--cache-bytes", "1MB", "--cluster", "testdata/cluster.yaml"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0, want an error", args)
		}
	}
}

// TestExplainCache: --cache-bytes adds lru and the cache table, optimal
// keeps samples resident, and its steady-state epoch is below nooff's and
// at least the bound with the cache.
func TestExplainCache(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"explain", "--synthetic", "openimages-like:300", "--link-mbit", "100", "--storage-cores", "1", "--cache-bytes", "25%"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	rows := map[string][]string{}
	inCache := false
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "cache:" && strings.Contains(line, "split 0 (the file;") {
			inCache = true
		}
		if strings.HasPrefix(line, "samples per split") {
			break
		}
		switch {
		case inCache && len(f) == 3 && f[0] == "bound,":
			rows["bound "+f[1]] = []string{f[0], "", "", "", f[2]}
		case inCache && len(f) >= 5:
			rows[f[0]] = f
		}
	}
	for _, want := range []string{"25.0% of the dataset", "lru", "resident"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	num := func(name string, col int) float64 {
		f := rows[name]
		if len(f) <= col {
			t.Fatalf("no cache row %q:\n%s", name, out.String())
		}
		x, err := strconv.ParseFloat(f[col], 64)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	// Columns: policy, resident, resident MB, epoch 0 s, epoch s.
	if num("optimal", 1) == 0 || num("nooff", 1) != 0 || num("lru", 1) != 0 {
		t.Errorf("resident: optimal %v, nooff %v, lru %v; want optimal > 0, the others 0\n%s", num("optimal", 1), num("nooff", 1), num("lru", 1), out.String())
	}
	if opt, no, lru := num("optimal", 4), num("nooff", 4), num("lru", 4); !(opt < lru && lru < no) {
		t.Errorf("epochs: optimal %v, lru %v, nooff %v: want optimal < lru < nooff\n%s", opt, lru, no, out.String())
	}
	if b, b0, opt := num("bound cache", 4), num("bound none", 4), num("optimal", 4); !(b <= opt && b < b0) {
		t.Errorf("bounds: with the cache %v, without %v, optimal %v: want the cache's below both\n%s", b, b0, opt, out.String())
	}
}

// TestExplainEstimate plans from the headers of a generated ImageFolder.
func TestExplainEstimate(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.WriteImageFolder(dir, synth.ImageNetLike, 2, 24, 3); err != nil {
		t.Fatal(err)
	}
	// A file that is no JPEG is skipped and said so.
	if err := os.WriteFile(filepath.Join(dir, "class_000", "bad.jpg"), []byte("not a jpeg"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run([]string{"explain", "--estimate", dir, "--calibrate", "6", "--link-mbit", "100", "--storage-cores", "0.5"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"24 samples", "pipeline imagenet-train", "optimal", "bound", "samples per split"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "1 files under") {
		t.Errorf("stderr %q does not report the skipped file", errOut.String())
	}
	if got := cutColumn(t, out.String()); got["optimal"] == 0 {
		t.Errorf("cut column %v: want optimal > 0 (the estimate has the cut)\n%s", got, out.String())
	}
}

// cutColumn reads the first table's last column: samples sent as cuts,
// by policy.
func cutColumn(t *testing.T, out string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 7 {
			continue
		}
		n, err := strconv.Atoi(f[6])
		if err != nil {
			continue
		}
		if _, seen := got[f[0]]; !seen {
			got[f[0]] = n
		}
	}
	if len(got) < 5 {
		t.Fatalf("no cut column in\n%s", out)
	}
	return got
}
