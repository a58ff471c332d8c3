package experiment

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/batch"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
)

func TestConfigPipelines(t *testing.T) {
	c := Config{Data: "x", Out: "x"}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Pipeline != DefaultPipeline || len(c.Pipelines) != 1 || c.Pipelines[0] != DefaultPipeline {
		t.Errorf("default: pipeline %q, pipelines %q", c.Pipeline, c.Pipelines)
	}
	c = Config{Data: "x", Out: "x", Pipelines: []string{"imagenet-train-q95", "imagenet-train"}}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Pipeline != "imagenet-train-q95" {
		t.Errorf("got pipeline %q, want the first of the list", c.Pipeline)
	}
	for name, set := range map[string]func(*Config){
		"twice": func(c *Config) { c.Pipelines = []string{"imagenet-train", "imagenet-train"} },
		"empty": func(c *Config) { c.Pipelines = []string{"imagenet-train", ""} },
		"reference": func(c *Config) {
			c.Pipelines, c.Reference = []string{"imagenet-train", "imagenet-train-q95"}, "ref.samples"
		},
	} {
		c := Config{Data: "x", Out: "x"}
		set(&c)
		if err := c.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// fidelityData writes n generated imagenet-like photographs in dir and
// returns the dataset as the storage agent indexes it.
func fidelityData(t *testing.T, dir string, n int) *dataset.Dataset {
	t.Helper()
	if _, err := synth.WriteImageFolder(dir, synth.ImageNetLike, 5, n, 1); err != nil {
		t.Fatal(err)
	}
	d, err := dataset.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// deliveredSHA is the hash the compute agent logs for p's tensor of key.
func deliveredSHA(t *testing.T, d *dataset.Dataset, p *ops.Pipeline, key ops.Key) string {
	t.Helper()
	raw, err := d.Read(key.Sample)
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.Run(key, ops.Encoded(raw), 0, p.Len())
	if err != nil {
		t.Fatal(err)
	}
	sha := batch.RowSHA(v.(*ops.Tensor))
	return hex.EncodeToString(sha[:])
}

// TestFidelityRunDir: a run folder's samples file, one line of it with a
// hash the recomputed tensor does not have: every delivered sample is
// compared, the bad line is counted out of the verified ones and named,
// and the PSNR is a JPEG q95's.
func TestFidelityRunDir(t *testing.T) {
	const seed, n = 11, 4
	data := t.TempDir()
	d := fidelityData(t, data, n)
	q95, err := ops.Preset("imagenet-train-q95")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for ep := range uint64(2) {
		for id := range uint64(n) {
			sha := deliveredSHA(t, d, q95, ops.Key{Seed: seed, Epoch: ep, Sample: id})
			if ep == 1 && id == 2 {
				sha = strings.Repeat("0", 64)
			}
			lines = append(lines, fmt.Sprintf("%d %d %s", ep, id, sha))
		}
	}
	run := filepath.Join(t.TempDir(), "100mbit-cpu1", "imagenet-train-q95")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	samples := filepath.Join(run, "optimal.samples")
	if err := os.WriteFile(samples, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	x := &experiment{cfg: Config{Pipelines: []string{"imagenet-train", "imagenet-train-q95"}, Seed: seed},
		res:          &results.Results{Dataset: results.Dataset{Path: data}},
		fidelityFrom: map[string]fidelitySource{"imagenet-train-q95": {samples: samples, run: "optimal"}}}
	got := x.fidelity(context.Background())
	if len(got) != 1 {
		t.Fatalf("got %d fidelity lines, want 1: %+v", len(got), got)
	}
	f := got[0]
	if f.Pipeline != "imagenet-train-q95" || f.Reference != "imagenet-train" || f.Run != "optimal" {
		t.Errorf("names: %+v", f)
	}
	if f.Samples != 2*n || f.Verified != 2*n-1 || !strings.Contains(f.Error, "1 of 8") {
		t.Errorf("got %d samples, %d verified, error %q; want %d, %d and the mismatch named", f.Samples, f.Verified, f.Error, 2*n, 2*n-1)
	}
	if !(f.PSNRMeanDB > 30 && f.PSNRMeanDB < 70) || !(f.PSNRMinDB <= f.PSNRMeanDB) || !(f.PSNRPooledDB > 30) {
		t.Errorf("PSNR mean %.2f, min %.2f, pooled %.2f dB: want a q95 JPEG's", f.PSNRMeanDB, f.PSNRMinDB, f.PSNRPooledDB)
	}
	if !(f.MaxAbsError > 0) || math.Abs(f.MaxAbsLevels-f.MaxAbsError*255*0.224) > f.MaxAbsLevels*0.03+1 {
		t.Errorf("max abs error %v (%v levels)", f.MaxAbsError, f.MaxAbsLevels)
	}
	if !strings.Contains(f.Line(), "imagenet-train-q95 against imagenet-train: PSNR mean") {
		t.Errorf("line %q", f.Line())
	}

	// A lossy pipeline with no run to compare says so.
	x.fidelityFrom = map[string]fidelitySource{}
	if got := x.fidelity(context.Background()); len(got) != 1 || got[0].Error == "" {
		t.Errorf("no run: %+v", got)
	}
	// No lossless pipeline beside it: nothing to compare.
	x.cfg.Pipelines = []string{"imagenet-train-q95"}
	if got := x.fidelity(context.Background()); got != nil {
		t.Errorf("one pipeline: %+v", got)
	}
}

// TestExperimentPipelinesNetns: two pipelines side by side in one cell:
// the policy once per pipeline (the policies' plans under a lossy
// pipeline: TestTrainingIdenticalAcrossPlans), each exactly once and content-checked
// against its own pipeline's reference, each pipeline with its own
// profile and bound, and the lossy pipeline's fidelity verified against
// every delivered hash.
func TestExperimentPipelinesNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries for about half a minute")
	}
	if err := netns.Available(); err != nil {
		testutil.Require(t, "namespaces unavailable (%v); CI runs this as root", err)
	}
	bins := buildBinaries(t)
	out := t.TempDir()
	const n, epochs = 16, 2
	cfg := Config{
		Data: smallDataset(t, n), DataKind: "imagenet-like", DataSeed: 7, Out: out,
		Rates: []shape.Rate{shape.MustParseRate("40mbit")}, StorageCPUs: []float64{1}, Epochs: epochs, Seed: 3,
		Policies: []string{"nooff"}, Pipelines: []string{"imagenet-train", "imagenet-train-q95"},
		Bin: bins, Mode: ModeNetns, Log: zerolog.Nop(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	checkNothingLeft(t, bins)
	res, err := results.Load(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := res.Cells[0]
	if len(res.Pipelines) != 2 || len(c.Runs) != 2 || len(c.PipelineBounds) != 2 {
		t.Fatalf("pipelines %q, %d runs, %d pipeline bounds: want 2, 2, 2", res.Pipelines, len(c.Runs), len(c.PipelineBounds))
	}
	for i, r := range c.Runs {
		want := cfg.Pipelines[i]
		if r.Pipeline != want || r.Error != "" || !r.ExactlyOnce || !r.ContentMatches {
			t.Errorf("run %d %s [%s]: want [%s], error %q, exactly once %v, content %v", i, r.Policy, r.Pipeline, want, r.Error, r.ExactlyOnce, r.ContentMatches)
		}
		if _, err := os.Stat(filepath.Join(out, cellDir(c.Rate, c.StorageCPUs, 0), r.Pipeline, r.Policy+".samples")); err != nil {
			t.Error(err)
		}
	}
	for _, p := range []string{"profile.zst", "profile-imagenet-train-q95.zst"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Errorf("each pipeline's profile: %v", err)
		}
	}
	if len(res.Fidelity) != 1 {
		t.Fatalf("fidelity %+v: want one line", res.Fidelity)
	}
	f := res.Fidelity[0]
	t.Logf("fidelity: %s", f.Line())
	if f.Error != "" || f.Samples != n*epochs || f.Verified != f.Samples || !(f.PSNRMeanDB > 25) {
		t.Errorf("fidelity %+v: want every delivered sample verified", f)
	}
}
