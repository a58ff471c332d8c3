package testbed

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/compute-agent/computeagent"
)

// BenchmarkPolicyPrediction is issue 4's end-to-end check: each policy's
// measured epoch time against the time its plan predicted, over a shaped
// link, with the real binaries:
//
//	go test -run '^$' -bench PolicyPrediction -benchtime 1x ./testbed/
//
// One storage agent with a CPU budget (STORAGE_CPUS, default 1) serves an
// openimages-like dataset (BENCH_IMAGES, default 300) behind a link shaped
// at SHAPED_RATE (default 100mbit; tc tbf between namespaces when root,
// else shape.Proxy, as BenchmarkLinkBoundNoOff). For each policy
// (POLICIES, comma-separated; default all six) the compute agent runs
// --policy P --epochs EPOCHS (default 3) with a GPU so fast it never
// bounds an epoch. All runs share one --profile file: the first run
// profiles its first epoch (stage 2, forced so that it runs whatever
// stage 1 finds), the later ones reuse it and run their plan from their
// first epoch. COMPUTE_FLAGS adds flags to the compute agent's.
//
// The check compares the last epoch (a planned one: the first run's first
// epoch is No-Off while it profiles) with the prediction that epoch ran
// under, and reports the worst |measured / predicted - 1| over the
// policies as worst-err-%.
func BenchmarkPolicyPrediction(b *testing.B) {
	epochs := envInt(b, "EPOCHS", 3)
	if epochs < 2 {
		b.Fatal("EPOCHS: want at least 2 (the first run profiles its first epoch)")
	}
	policies := computeagent.Policies
	if s := os.Getenv("POLICIES"); s != "" {
		policies = strings.Split(s, ",")
	}
	cpus := os.Getenv("STORAGE_CPUS")
	if cpus == "" {
		cpus = "1"
	}
	cores, err := strconv.ParseFloat(cpus, 64)
	if err != nil {
		b.Fatalf("STORAGE_CPUS=%q: %v", cpus, err)
	}
	if os.Getenv("BENCH_IMAGES") == "" {
		b.Setenv("BENCH_IMAGES", "300")
	}
	bins := buildAgents(b)
	data, n, size := dataset(b)
	l := newShapedLink(b, bins, data, "--cpus", cpus)
	b.Logf("dataset: %d openimages-like images, %.1f MB; storage agent --cpus %s", n, float64(size)/1e6, cpus)
	dir := b.TempDir()
	profile := filepath.Join(dir, "profile.zst")
	extra := strings.Fields(os.Getenv("COMPUTE_FLAGS"))

	type result struct {
		policy string
		run    computeRun
		cpu    float64 // storage agent CPU seconds over the run
	}
	var results []result
	for b.Loop() {
		os.Remove(profile)
		results = results[:0]
		for _, p := range policies {
			report := filepath.Join(dir, "report-"+p+".jsonl")
			os.Remove(report)
			args := append([]string{"--storage", l.addr, "--policy", p, "--epochs", strconv.Itoa(epochs),
				"--profile", profile, "--force-profile", "--gpu", fastGPU, "--report", report,
				"--log-level", "warn", "--log-format", "json"}, extra...)
			cpu0 := procCPU(l.storagePID)
			run := runCompute(b, l.command(bins.compute, args...), report, nil)
			results = append(results, result{p, run, (procCPU(l.storagePID) - cpu0).Seconds()})
		}
	}

	var worst float64
	var table strings.Builder
	// link-t and sto-t are what the epoch used of the two resources,
	// measured: its bytes at stage 1's link rate, and the storage CPU its
	// responses reported (raw reads included) over the budget. Their
	// maximum against the measured time is the loss to imperfect overlap;
	// against the prediction, the error of the resource estimates.
	fmt.Fprintf(&table, "\n%-9s %5s %9s %9s %7s %9s %9s %9s %9s %9s %9s %9s %s\n", "policy", "epoch", "predicted", "measured", "ratio",
		"bound", "MB", "MB/s", "cmp-cpu", "sto-cpu", "link-t", "sto-t", "notes")
	for _, r := range results {
		var linkRate float64
		for i, e := range r.run.epochs {
			if e.Stage1 != nil {
				linkRate = e.Stage1.LinkBytesPerSec
			}
			var linkT float64
			if linkRate > 0 {
				linkT = float64(e.BytesReceived) / linkRate
			}
			ratio := e.Seconds / e.PredictedSeconds
			var notes []string
			if e.Profiled {
				notes = append(notes, "profiled (No-Off)")
			}
			if e.Replanned {
				notes = append(notes, "re-planned after")
			}
			if s := e.Stage1; s != nil {
				notes = append(notes, fmt.Sprintf("stage1: link %.2f MB/s, compute %.1f/s, storage %.1f/s, speed %.2f, bottleneck %s, profile %s",
					s.LinkBytesPerSec/1e6, s.ComputeSamplesPerSec, s.StorageSamplesPerSec, s.StorageSpeed, s.Bottleneck, s.Profile))
			}
			fmt.Fprintf(&table, "%-9s %5d %8.2fs %8.2fs %7.3f %8.2fs %9.1f %9.2f %8.2fs %8.2fs %8.2fs %8.2fs %s\n", r.policy, e.Epoch,
				e.PredictedSeconds, e.Seconds, ratio, e.BoundSeconds, float64(e.BytesReceived)/1e6,
				float64(e.BytesReceived)/e.Seconds/1e6, e.ComputeCPUSeconds, e.StorageCPUSeconds,
				linkT, e.StorageCPUSeconds/cores, strings.Join(notes, "; "))
			if i == len(r.run.epochs)-1 {
				worst = max(worst, math.Abs(ratio-1))
			}
		}
		fmt.Fprintf(&table, "%-9s storage agent CPU over the run (stage 1 included): %.2f s\n", r.policy, r.cpu)
	}
	b.Log(table.String())
	b.Logf("link: %s; last epoch of each policy against its prediction: worst |measured/predicted - 1| = %.1f%%", l.rate, 100*worst)
	b.ReportMetric(100*worst, "worst-err-%")
	b.ReportMetric(0, "ns/op")
}
