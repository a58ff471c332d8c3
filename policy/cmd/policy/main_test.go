package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/policy/policytest"
	"github.com/sophon-dl/sophon/profiler"
)

func TestExplain(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"explain", "--synthetic", "openimages-like:500", "--link-mbit", "430", "--storage-cores", "8"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"nooff", "alloff", "resizeoff", "fastflow", "sophon", "optimal", "bound", "500 samples"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// A saved profile explains the same way.
	path := filepath.Join(t.TempDir(), "p.prof")
	if err := profiler.Save(path, policytest.Synthetic("imagenet-like", 200, 3)); err != nil {
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
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0, want an error", args)
		}
	}
}
