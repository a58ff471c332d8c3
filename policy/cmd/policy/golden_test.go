package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/explain"
	"github.com/sophon-dl/sophon/policy/synthetic"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// goldenCases pin `policy explain`'s output, byte for byte, over the
// settings that make each resource the bottleneck, the JPEG cut with and
// without, tiny profiles (solved exhaustively) and bucketed clusters.
var goldenCases = []struct {
	name string
	args []string
}{
	{"openimages-ample", []string{"explain", "--synthetic", "openimages-like:2000", "--link-mbit", "430", "--storage-cores", "32", "--compute-cores", "8", "--gpu-rate", "1150"}},
	{"openimages-storage", []string{"explain", "--synthetic", "openimages-like:2000", "--link-mbit", "430", "--storage-cores", "0.503", "--compute-cores", "8", "--gpu-rate", "1150"}},
	{"openimages-nocut", []string{"explain", "--synthetic", "openimages-like:1500", "--link-mbit", "430", "--storage-cores", "0.503", "--cut=false", "--seed", "4"}},
	{"imagenet-link", []string{"explain", "--synthetic", "imagenet-like:3000", "--link-mbit", "430", "--storage-cores", "32", "--compute-cores", "8", "--gpu-rate", "1150"}},
	{"imagenet-compute", []string{"explain", "--synthetic", "imagenet-like:1000", "--link-mbit", "4000", "--storage-cores", "4", "--compute-cores", "1", "--storage-speed", "0.5"}},
	{"imagenet-gpu", []string{"explain", "--synthetic", "imagenet-like:800", "--link-mbit", "10000", "--gpu-rate", "100"}},
	{"imagenet-unlimited", []string{"explain", "--synthetic", "imagenet-like:300", "--link-mbit", "0"}},
	{"openimages-q95", []string{"explain", "--synthetic", "openimages-like:2000", "--pipeline", "imagenet-train-q95", "--link-mbit", "500", "--storage-cores", "32", "--compute-cores", "8", "--gpu-rate", "1150"}},
	{"imagenet-q90-storage", []string{"explain", "--synthetic", "imagenet-like:2000", "--pipeline", "imagenet-train-q90", "--link-mbit", "500", "--storage-cores", "0.5", "--compute-cores", "8", "--gpu-rate", "1150"}},
	{"tiny-exact", []string{"explain", "--synthetic", "openimages-like:3", "--link-mbit", "100", "--storage-cores", "0.01", "--compute-cores", "0.05"}},
	{"tiny-nocut", []string{"explain", "--synthetic", "imagenet-like:4", "--link-mbit", "100", "--storage-cores", "0.02", "--cut=false"}},
	{"cluster-imagenet", []string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "imagenet-like:3000", "--replicas", "2"}},
	{"cluster-openimages-sophon", []string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "openimages-like:2000", "--replicas", "3", "--policy", "sophon", "--seed", "5"}},
	{"cluster-one-replica", []string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "openimages-like:1000", "--replicas", "1", "--cut=false", "--policy", "nooff"}},
	{"cluster-bucketed", []string{"explain", "--cluster", "testdata/cluster.yaml", "--synthetic", "imagenet-like:20000", "--replicas", "2"}},
	{"cluster-uplink", []string{"explain", "--cluster", "testdata/cluster-uplink.yaml", "--synthetic", "openimages-like:2500", "--replicas", "2", "--policy", "roundrobin"}},
	{"cluster-tiny-exact", []string{"explain", "--cluster", "testdata/cluster-uplink.yaml", "--synthetic", "openimages-like:3", "--replicas", "1"}},
}

// TestGolden compares `policy explain` with testdata/NAME.golden, byte for
// byte; `go test -run TestGolden -update` rewrites them.
func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(c.args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			checkGolden(t, c.name, out.Bytes())
		})
	}
}

// TestGoldenLibrary pins explain.Single and explain.Cluster with
// what the command's flags cannot set: the transport cost per byte.
func TestGoldenLibrary(t *testing.T) {
	p := synthetic.WithCut(synthetic.Profile("openimages-like", 1200, 9), 9)
	r := policy.Resources{LinkBytesPerSec: 50e6, StorageCores: 1.5, ComputeCores: 6, GPUSamplesPerSec: 900, StorageSpeed: 0.9, StorageNSPerByte: 5}
	var out bytes.Buffer
	if err := explain.Single(&out, p, r); err != nil {
		t.Fatal(err)
	}
	out.WriteString("\n--- the same resources as a one-node cluster ---\n\n")
	c := policy.SingleNode(r)
	pl, err := policy.NewPlacement(make([]int32, len(p.Samples)), func(int) []int16 { return []int16{0} })
	if err != nil {
		t.Fatal(err)
	}
	if err := explain.Cluster(&out, p, c, pl, ""); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "library-transport", out.Bytes())
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
