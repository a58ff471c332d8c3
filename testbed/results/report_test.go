package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPolicies are the synthetic runs' policies with their steady epoch
// seconds, payload bytes and storage CPU seconds in the first cell.
var testPolicies = []struct {
	name    string
	secs    float64
	bytes   int64
	storage float64
}{
	{"nooff", 10, 100e6, 1},
	{"alloff", 8, 30e6, 20},
	{"resizeoff", 6, 40e6, 12},
	{"fastflow", 5, 60e6, 8},
	{"sophon", 4, 35e6, 9},
	{"optimal", 3.8, 33e6, 9.5},
	{PeerPolicy, 12, 100e6, 0.5},
}

// testCell is one synthetic cell; factor scales every run's time.
type testCell struct {
	rate   string
	bps    float64
	cpus   float64
	factor float64
}

var testGrid = []testCell{
	{"500mbit", 5e8, 0.5, 1},
	{"500mbit", 5e8, 2, 0.8},
	{"1gbit", 1e9, 0.5, 0.6},
	{"1gbit", 1e9, 2, 0.5},
}

// synthetic is a 2 rates x 2 CPUs experiment with six policies and the
// peer in every cell; the peer is skipped in 1gbit/2, fastflow fails in
// 500mbit/2 and alloff is not exactly-once in 1gbit/0.5.
func synthetic(grid []testCell) *Results {
	r := &Results{
		Version:  Version,
		Started:  time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC),
		Finished: time.Date(2025, 3, 1, 10, 42, 0, 0, time.UTC),
		Machine: Machine{
			Hostname: "testhost-7", CPUModel: "Example CPU @ 3.0GHz", Cores: 16,
			Kernel: "6.8.0", GoVersion: "go1.26.8", Pinning: "storage 0-1, compute 2-7",
		},
		Mode:     ModeLoopback,
		ModeNote: "not root: loopback with an in-process token bucket",
		Dataset: Dataset{
			Path: "/tmp/data", Kind: "imagenet-like", Seed: 7, Samples: 1000,
			Bytes: 110e6, MeanBytes: 110e3,
		},
		Pipeline: "resnet-train",
		GPU:      "sim:800",
		Epochs:   3,
		Seed:     42,
		Scale:    "link scaled down 20x",
	}
	for _, g := range grid {
		c := Cell{Rate: g.rate, RateBitsPerSec: g.bps, StorageCPUs: g.cpus}
		for _, p := range testPolicies {
			run := Run{Policy: p.name, ExactlyOnce: true, ContentMatches: true}
			switch {
			case p.name == PeerPolicy && g.rate == "1gbit" && g.cpus == 2:
				run.Skipped = "torchvision not installed"
				run.ExactlyOnce, run.ContentMatches = false, false
				c.Runs = append(c.Runs, run)
				continue
			case p.name == "fastflow" && g.rate == "500mbit" && g.cpus == 2:
				run.Error = "storage agent: connection reset"
			}
			for ep := 1; ep <= 3; ep++ {
				secs := p.secs * g.factor
				if ep == 1 {
					secs *= 1.5
				}
				e := Epoch{
					Epoch: ep, Seconds: secs, Samples: 1000,
					AgentBytes: p.bytes, KernelBytes: p.bytes * 21 / 20,
					StorageCPUSeconds: p.storage, ComputeCPUSeconds: 30 - p.storage,
					GPUIdleFraction: 0.25,
					Profiled:        ep == 1 && (p.name == "sophon" || p.name == "optimal"),
					Replanned:       ep == 2 && p.name == "sophon",
				}
				if p.name != PeerPolicy {
					e.PredictedSeconds = p.secs * g.factor * 0.95
					e.AgentBoundSeconds = 3.5 * g.factor
				}
				run.Epochs = append(run.Epochs, e)
			}
			if p.name == "alloff" && g.rate == "1gbit" && g.cpus == 0.5 {
				run.ExactlyOnce = false
				run.Epochs[2].Duplicates = 3
			}
			c.Runs = append(c.Runs, run)
		}
		r.Cells = append(r.Cells, c)
	}
	return r
}

func TestWriteReportMarkdown(t *testing.T) {
	dir := t.TempDir()
	r := synthetic(testGrid)
	report, charts, err := WriteReport(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "report.md"); report != want {
		t.Errorf("report path %q, want %q", report, want)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		"testhost-7", "Example CPU @ 3.0GHz", "16 cores", "6.8.0", "go1.26.8",
		"loopback", "in-process token bucket", "500mbit, 1gbit", "0.5, 2",
		"storage 0-1, compute 2-7", "/tmp/data", "imagenet-like", "seed 7", "1000 samples",
		"110.0 MB", "110.0 kB", "resnet-train", "sim:800", "link scaled down 20x",
		"## How to read this",
		"2.50x",                     // nooff 10 s / sophon 4 s
		"| NO ",                     // alloff in 1gbit/0.5
		"torchvision not installed", // the skipped run's reason
		"storage agent: connection reset",
		"profiled (epoch 1)", "replanned (epoch 2)", "3 duplicates",
		"sophon vs nooff 2.50x", "fastest optimal (3.80 s)",
		"optimal vs bound +8.6%", // 3.8 s against 3.5 s
		"## Sweeps",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, p := range testPolicies {
		if !strings.Contains(text, "| "+p.name+" ") {
			t.Errorf("report has no row for %s", p.name)
		}
	}
	if len(charts) != 4*3+4 {
		t.Errorf("got %d charts, want %d", len(charts), 4*3+4)
	}
	for _, ch := range charts {
		if filepath.Dir(ch) != dir {
			t.Errorf("chart %s not in %s", ch, dir)
		}
		if _, err := os.Stat(ch); err != nil {
			t.Error(err)
		}
		if link := "](" + filepath.Base(ch) + ")"; !strings.Contains(text, link) {
			t.Errorf("report does not link %s", filepath.Base(ch))
		}
	}
	for _, want := range []string{
		"epoch-time-500mbit-cpu0.5.svg", "wire-bytes-1gbit-cpu2.svg", "storage-cpu-500mbit-cpu2.svg",
		"sweep-rate-cpu0.5.svg", "sweep-rate-cpu2.svg", "sweep-cpus-500mbit.svg", "sweep-cpus-1gbit.svg",
	} {
		if !strings.Contains(text, "]("+want+")") {
			t.Errorf("report does not link %s", want)
		}
	}
}

func TestWriteReportDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if _, _, err := WriteReport(a, synthetic(testGrid)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := WriteReport(b, synthetic(testGrid)); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		x, _ := os.ReadFile(filepath.Join(a, f.Name()))
		y, err := os.ReadFile(filepath.Join(b, f.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two writes (%v)", f.Name(), err)
		}
	}
}

func TestWriteReportNil(t *testing.T) {
	if _, _, err := WriteReport(t.TempDir(), nil); err != ErrNoResults {
		t.Errorf("got %v, want %v", err, ErrNoResults)
	}
}

func TestTable(t *testing.T) {
	var b strings.Builder
	if err := Table(&b, synthetic(testGrid)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"== 500mbit, 0.5 storage CPUs ==", "== 1gbit, 2 storage CPUs ==",
		"10.00", "4.00", "2.50x", "NO", "torchvision not installed",
		"summary: fastest optimal (3.80 s); sophon vs nooff 2.50x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}

	blocks := strings.Split(strings.TrimSpace(out), "\n\n")
	if len(blocks) != 4 {
		t.Fatalf("got %d cell blocks, want 4:\n%s", len(blocks), out)
	}
	for _, block := range blocks {
		lines := strings.Split(block, "\n")
		head, rows := lines[1], lines[2:len(lines)-1] // title, header, rows, summary
		if len(rows) != len(testPolicies) {
			t.Errorf("got %d rows, want %d:\n%s", len(rows), len(testPolicies), block)
		}
		at := 0
		for _, col := range columns[:len(columns)-1] { // notes is ragged
			i := strings.Index(head[at:], col.Text)
			if i < 0 {
				t.Fatalf("header %q lacks %q", head, col.Text)
			}
			start, end := at+i, at+i+len(col.Text)
			at = end
			for _, row := range rows {
				if col.Right && len(row) < end || len(row) <= start {
					t.Errorf("row %q shorter than header", row)
					continue
				}
				if col.Right {
					// Right-aligned: the cell ends where the header ends.
					if row[end-1] == ' ' || (end < len(row) && row[end] != ' ') {
						t.Errorf("column %q does not line up:\n%s\n%s", col.Text, head, row)
					}
				} else if row[start] == ' ' || (start > 0 && row[start-1] != ' ') {
					t.Errorf("column %q does not line up:\n%s\n%s", col.Text, head, row)
				}
			}
		}
	}
}

func TestSpeedup(t *testing.T) {
	for _, tt := range []struct {
		base, secs float64
		want       string
	}{
		{10, 4, "2.50x"},
		{10, 10, "1.00x"},
		{4, 10, "0.40x"},
		{0, 4, none},
		{10, 0, none},
	} {
		if got := speedup(tt.base, tt.secs); got != tt.want {
			t.Errorf("speedup(%v, %v): got %v, want %v", tt.base, tt.secs, got, tt.want)
		}
	}
}

// TestTrainingTable: the training rows get a side-by-side table (images/s
// reaching the loop, the first losses) in the report and the printed
// table, and stay out of the speed-ups, the summary and the charts.
func TestTrainingTable(t *testing.T) {
	r := synthetic(testGrid[:1])
	c := &r.Cells[0]
	for i := range c.Runs {
		if c.Runs[i].Policy == PeerPolicy {
			c.Runs[i].Training = true
			c.Runs[i].LoopImages, c.Runs[i].LoopSteps, c.Runs[i].LoopSeconds = 3000, 24, 100
			c.Runs[i].LoopImagesPerSec, c.Runs[i].LoopWaitSeconds = 30, 60
			c.Runs[i].FirstLosses = []float64{2.0794, 2.0512}
		}
	}
	trainer := Run{Policy: TrainerPolicy, Plan: "nooff", Training: true, ExactlyOnce: true,
		LoopImages: 3000, LoopSteps: 24, LoopSeconds: 40, LoopImagesPerSec: 75, LoopWaitSeconds: 2.5,
		FirstLosses: []float64{2.0801, 2.0433, 2.0012}}
	for ep := 1; ep <= 3; ep++ {
		// Slower than any policy: its epochs include the CNN's steps.
		trainer.Epochs = append(trainer.Epochs, Epoch{Epoch: ep, Seconds: 1, Samples: 1000, AgentBytes: 100e6})
	}
	c.Runs = append(c.Runs, trainer)

	dir := t.TempDir()
	report, charts, err := WriteReport(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(report)
	text := string(b)
	for _, want := range []string{
		"**Training loop.**", "| images/s reaching the loop |", "loss of the first 10 steps",
		"| sophon-client (nooff) ", " 75.0 |", " 30.0 |",
		"2.0801 2.0433 2.0012", "2.0794 2.0512",
		"fastest optimal (3.80 s)", // not the trainer's 1 s
		" 1000.0 |",                // its last epoch's images/s
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if len(charts) != 3 {
		t.Errorf("%d charts, want 3", len(charts))
	}
	for _, ch := range charts {
		svg, _ := os.ReadFile(ch)
		if strings.Contains(string(svg), TrainerPolicy) || strings.Contains(string(svg), PeerPolicy) {
			t.Errorf("%s charts a training row", filepath.Base(ch))
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "| "+TrainerPolicy) || strings.HasPrefix(line, "| "+PeerPolicy) {
			if strings.Contains(line, "x |") {
				t.Errorf("a training row has a speed-up: %s", line)
			}
		}
	}

	var tb strings.Builder
	if err := Table(&tb, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"training loop:", "img/s to loop", "sophon-client (nooff)", "75.0", "2.0801 2.0433 2.0012"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}

	// The fields survive results.json.
	if _, err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := Load(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	got := back.Cells[0].Runs[len(back.Cells[0].Runs)-1]
	if !got.Training || got.Plan != "nooff" || got.LoopImagesPerSec != 75 || len(got.FirstLosses) != 3 || got.FirstLosses[2] != 2.0012 {
		t.Errorf("read back %+v", got)
	}
}

// TestRowLink: the steady epoch's round trip and TCP bytes in flight have
// their column; an epoch whose link was not read shows none.
func TestRowLink(t *testing.T) {
	run := &Run{Policy: "nooff", Epochs: []Epoch{{Epoch: 0, Seconds: 2, Samples: 10},
		{Epoch: 1, Seconds: 1, Samples: 10, RTTSeconds: 0.0831, InFlightMeanBytes: 4.25e6, InFlightPeakBytes: 5.28e6}}}
	col := len(columns) - 4
	if columns[col].Text != "rtt ms/flight MB" {
		t.Fatalf("column %d is %q", col, columns[col].Text)
	}
	if got, want := runRow(run, nil, 0)[col], "83.1 / 4.2, 5.3"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	run.Epochs[1].RTTSeconds = 0
	if got := runRow(run, nil, 0)[col]; got != none {
		t.Errorf("unread link: got %q, want %q", got, none)
	}
}
