package results

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/testbed/tensors"
)

// twoPipelines is a cell whose policies ran under two pipelines, each
// with its own bound, and a peer row that names none.
func twoPipelines() *Results {
	ep := func(secs float64, bytes int64, cpu float64) []Epoch {
		return []Epoch{{Epoch: 0, Seconds: 9, Samples: 100}, {Epoch: 1, Seconds: secs, Samples: 100, AgentBytes: bytes,
			KernelPayloadBytes: bytes + bytes/50, ComputeCPUSeconds: cpu}}
	}
	run := func(policy, pipe string, secs float64, bytes int64, cpu float64) Run {
		return Run{Policy: policy, Pipeline: pipe, Epochs: ep(secs, bytes, cpu), ExactlyOnce: true, ContentMatches: true}
	}
	c := Cell{Rate: "100mbit", RateBitsPerSec: 1e8, StorageCPUs: 1,
		Bound:          &CellBound{Seconds: 3, Pipeline: "imagenet-train"},
		PipelineBounds: []*CellBound{{Seconds: 3, Pipeline: "imagenet-train"}, {Seconds: 1, Pipeline: "imagenet-train-q95"}},
		Runs: []Run{
			run("nooff", "imagenet-train", 8, 30e6, 2), run("optimal", "imagenet-train", 4, 15e6, 1),
			run("nooff", "imagenet-train-q95", 10, 30e6, 3), run("optimal", "imagenet-train-q95", 2, 1.6e6, 0.2),
			{Policy: PeerPolicy, Epochs: ep(9, 30e6, 0), ExactlyOnce: true},
		}}
	return &Results{Version: Version, Pipeline: "imagenet-train", Pipelines: []string{"imagenet-train", "imagenet-train-q95"},
		Epochs: 2, Cells: []Cell{c},
		Fidelity: []tensors.Fidelity{{Pipeline: "imagenet-train-q95", Reference: "imagenet-train", Samples: 200, Verified: 200,
			PSNRMeanDB: 44.5, PSNRMinDB: 40.1, PSNRPooledDB: 44, MaxAbsError: 0.2, MaxAbsLevels: 11.4}}}
}

// TestTwoPipelines: each row names its pipeline and is compared with its
// own pipeline's nooff and bound; the columns per sample; the summary
// compares each policy across pipelines; the fidelity line reaches the
// report and survives results.json.
func TestTwoPipelines(t *testing.T) {
	r := twoPipelines()
	c := &r.Cells[0]
	if got := c.Pipelines(); len(got) != 2 || got[1] != "imagenet-train-q95" {
		t.Fatalf("pipelines %q", got)
	}
	if v := c.View("imagenet-train-q95"); len(v.Runs) != 2 || v.BoundSeconds() != 1 {
		t.Errorf("q95 view: %d runs, bound %v; want 2 and 1", len(v.Runs), v.BoundSeconds())
	}
	if v := c.View("imagenet-train"); len(v.Runs) != 3 || v.BoundSeconds() != 3 {
		t.Errorf("first view: %d runs (the peer's too), bound %v; want 3 and 3", len(v.Runs), v.BoundSeconds())
	}
	rows := cellTable(c)
	byName := map[string][]string{}
	for _, row := range rows {
		byName[row[0]] = row
	}
	q := byName["optimal [imagenet-train-q95]"]
	if q == nil {
		t.Fatalf("no q95 optimal row in %q", rows)
	}
	col := func(text string) int {
		for i, c := range columns {
			if c.Text == text {
				return i
			}
		}
		t.Fatalf("no column %q", text)
		return -1
	}
	if got := q[col("vs nooff")]; got != "5.00x" { // 10 s / 2 s: its own pipeline's nooff
		t.Errorf("q95 optimal vs nooff %q, want 5.00x", got)
	}
	if got := q[col("bound s")]; got != "1.00" {
		t.Errorf("q95 optimal bound %q, want its pipeline's 1.00", got)
	}
	if got := q[col("kB/sample")]; got != "16.0 / 16.3" {
		t.Errorf("q95 optimal kB/sample %q, want 16.0 / 16.3", got)
	}
	if got := q[col("comp ms/sample")]; got != "2.00" {
		t.Errorf("q95 optimal compute ms/sample %q, want 2.00", got)
	}
	if got := byName["optimal [imagenet-train]"][col("vs nooff")]; got != "2.00x" {
		t.Errorf("imagenet-train optimal vs nooff %q, want 2.00x", got)
	}
	s := summary(c)
	for _, want := range []string{"imagenet-train: fastest optimal [imagenet-train]", "imagenet-train-q95: fastest optimal [imagenet-train-q95]",
		"optimal [imagenet-train-q95] vs [imagenet-train] 2.00x", "nooff [imagenet-train-q95] vs [imagenet-train] 0.80x"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q: %s", want, s)
		}
	}
	dir := t.TempDir()
	path, charts, err := WriteReport(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(charts) == 0 || !strings.Contains(strings.Join(charts, " "), "imagenet-train-q95") {
		t.Errorf("charts %q: want each pipeline's", charts)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**Pipelines:** imagenet-train, imagenet-train-q95", "**Fidelity:** imagenet-train-q95 against imagenet-train: PSNR mean 44.50 dB",
		"optimal \\[imagenet-train-q95\\]"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if _, err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := Load(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Fidelity) != 1 || back.Fidelity[0].PSNRMeanDB != 44.5 || back.Cells[0].Runs[3].Pipeline != "imagenet-train-q95" ||
		len(back.Cells[0].PipelineBounds) != 2 {
		t.Errorf("read back: %+v", back)
	}
}

// TestTwoPipelinesRepeat: each pipeline's policies have rows of their own
// over the repetitions.
func TestTwoPipelinesRepeat(t *testing.T) {
	r := twoPipelines()
	r.Cells = append(r.Cells, r.Cells[0])
	r.Cells[0].Repetition, r.Cells[1].Repetition = 1, 2
	var got []string
	for _, row := range Repeatabilities(r) {
		got = append(got, row.Policy)
		if row.Runs != 2 {
			t.Errorf("%s: %d runs, want 2", row.Policy, row.Runs)
		}
	}
	want := []string{"nooff [imagenet-train]", "optimal [imagenet-train]", "nooff [imagenet-train-q95]", "optimal [imagenet-train-q95]", PeerPolicy}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("rows %q, want %q", got, want)
	}
}
