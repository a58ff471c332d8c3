package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExplainReplicated: --replicas all puts every sample on every node,
// one replica set.
func TestExplainReplicated(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "imagenet-like:300", "--replicas", "all"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if want := "3 replicas per sample, 1 distinct replica sets"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
}

func TestExplainCluster(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "imagenet-like:3000", "--replicas", "2"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	s := out.String()
	for _, want := range []string{"3000 samples", "3 storage nodes, 2 compute nodes, 8 ranks, 1 capped links",
		"nooff", "roundrobin", "sophon", "optimal", "bound", "binding resources",
		"optimal plan: epoch", "storage  samples", "compute  samples", "s0->c1", "egress s", "GPU s"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	// The per-node samples add up to the profile's.
	total := 0
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && (f[0] == "s0" || f[0] == "s1" || f[0] == "s2") {
			n := 0
			for _, ch := range f[1] {
				n = 10*n + int(ch-'0')
			}
			total += n
		}
	}
	if total != 3000 {
		t.Errorf("storage nodes serve %d samples, want 3000:\n%s", total, s)
	}
	// Another policy's plan on request.
	out.Reset()
	if code := run([]string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "openimages-like:500", "--policy", "roundrobin"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "roundrobin plan: epoch") {
		t.Errorf("--policy roundrobin: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

func TestExplainClusterErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unknown := write("unknown.yaml", "storage: [{name: s, egres: 1}]\ncompute: [{name: c}]\n")
	huge := write("huge.yaml", strings.Repeat("#", 1<<20+1))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "--cluster", unknown, "--synthetic", "imagenet-like:10"}, `unknown field "egres"`},
		{[]string{"explain", "--cluster", huge, "--synthetic", "imagenet-like:10"}, "exceeds a limit"},
		{[]string{"explain", "--cluster", filepath.Join(dir, "missing.yaml"), "--synthetic", "imagenet-like:10"}, "missing.yaml"},
		{[]string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "imagenet-like:10", "--link-mbit", "100"}, "--link-mbit does not apply"},
		{[]string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "imagenet-like:10", "--replicas", "4"}, "--replicas 4"},
		{[]string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "imagenet-like:10", "--replicas", "0"}, "or all"},
		{[]string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "imagenet-like:10", "--policy", "alloff"}, "unknown policy"},
		{[]string{"explain", "--cluster", "testdata/cluster.yaml"}, "--profile FILE, --synthetic KIND:N or --estimate DIR"},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error mentioning %q", c.args, code, errOut.String(), c.want)
		}
	}
}

func TestScale(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"scale", "--samples", "4000", "--storage", "3", "--compute", "2", "--ranks-per-node", "2"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"4000 imagenet-like samples", "optimal plan + bound", "s wall", "TotalAlloc", "HeapSys", "peak RSS",
		"bound:", "nooff", "roundrobin", "sophon", "optimal"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, args := range [][]string{
		{"scale", "--replicas", "9"},
		{"scale", "--kind", "cats"},
		{"scale", "--samples", "0"},
		{"scale", "--bogus"},
	} {
		if code := run(args, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0, want an error", args)
		}
	}
}
