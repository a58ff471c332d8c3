package results

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repeated is a 100mbit/1 grid point run three times and a 100mbit/0.5
// one run once; steady[policy] gives each repetition's last epoch.
func repeated(steady map[string][3]float64) *Results {
	r := &Results{Version: Version, Mode: ModeNetns, Epochs: 2, Repeat: 3}
	policies := []string{"nooff", "sophon", "sophon-nowc", "optimal", "optimal-nowc", PeerPolicy}
	for rep := 1; rep <= 3; rep++ {
		c := Cell{Rate: "100mbit", RateBitsPerSec: 1e8, StorageCPUs: 1, Repetition: rep}
		for _, p := range policies {
			secs, ok := steady[p]
			if !ok {
				continue
			}
			run := Run{Policy: p, ExactlyOnce: true, ContentMatches: true, WorkConservingOff: strings.HasSuffix(p, "-nowc")}
			run.Epochs = []Epoch{{Epoch: 0, Seconds: 99}, {Epoch: 1, Seconds: secs[rep-1]}}
			if secs[rep-1] == 0 {
				run.Error = "compute-agent: exit status 1"
			}
			c.Runs = append(c.Runs, run)
		}
		// A training row: never in the aggregate.
		c.Runs = append(c.Runs, Run{Policy: TrainerPolicy, Plan: "nooff", Training: true, Epochs: []Epoch{{Seconds: 40}}})
		r.Cells = append(r.Cells, c)
	}
	r.Cells = append(r.Cells, Cell{Rate: "100mbit", RateBitsPerSec: 1e8, StorageCPUs: 0.5, Runs: []Run{
		{Policy: "nooff", Epochs: []Epoch{{Seconds: 10}}},
	}})
	return r
}

func TestRepeatabilities(t *testing.T) {
	r := repeated(map[string][3]float64{
		"nooff":   {10, 11, 9},
		"sophon":  {5, 5, 5},
		"optimal": {5, 5.25, 4.9}, // 5% slower in repetition 2
		// The nowc pair: optimal within 3% everywhere; sophon-nowc failed
		// in repetition 3.
		"sophon-nowc":  {6, 6, 0},
		"optimal-nowc": {6.1, 5.9, 6},
		PeerPolicy:     {20, 20, 20},
	})
	got := Repeatabilities(r)
	var names []string
	for _, x := range got {
		names = append(names, x.Policy)
		if x.Rate != "100mbit" || x.StorageCPUs != 1 || len(x.Seconds) != 3 {
			t.Errorf("%s: %s/%v, %d repetitions; want the repeated grid point's 3", x.Policy, x.Rate, x.StorageCPUs, len(x.Seconds))
		}
	}
	if want := []string{"nooff", "sophon", "sophon-nowc", "optimal", "optimal-nowc", PeerPolicy}; !slices.Equal(names, want) {
		t.Fatalf("rows %v, want %v (not the trainer, not the grid point run once)", names, want)
	}
	by := map[string]Repeatability{}
	for _, x := range got {
		by[x.Policy] = x
	}
	for _, tc := range []struct {
		policy               string
		runs                 int
		mean, lo, hi, spread float64
		overSophon           []float64
		slower               bool
	}{
		{"nooff", 3, 10, 9, 11, 0.2, nil, false},
		{"sophon", 3, 5, 5, 5, 0, nil, false},
		{"optimal", 3, 5.05, 4.9, 5.25, 0.35 / 5.05, []float64{1, 1.05, 0.98}, true},
		{"sophon-nowc", 2, 6, 6, 6, 0, nil, false},
		{"optimal-nowc", 3, 6, 5.9, 6.1, 0.2 / 6, []float64{6.1 / 6, 5.9 / 6, 0}, false},
	} {
		x := by[tc.policy]
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
		if x.Runs != tc.runs || !near(x.Mean, tc.mean) || x.Min != tc.lo || x.Max != tc.hi || !near(x.Spread, tc.spread) ||
			x.SlowerThanSophon != tc.slower || len(x.OverSophon) != len(tc.overSophon) {
			t.Errorf("%s: got %+v, want %d runs, mean %v, min %v, max %v, spread %v, over sophon %v, slower %v",
				tc.policy, x, tc.runs, tc.mean, tc.lo, tc.hi, tc.spread, tc.overSophon, tc.slower)
			continue
		}
		for k := range tc.overSophon {
			if !near(x.OverSophon[k], tc.overSophon[k]) {
				t.Errorf("%s: over sophon %v, want %v", tc.policy, x.OverSophon, tc.overSophon)
			}
		}
	}
	if x := by["sophon-nowc"]; x.Seconds[2] != 0 {
		t.Errorf("a failed repetition counts: %v", x.Seconds)
	}

	// Nothing repeated: no rows.
	once := synthetic(testGrid)
	if rows := Repeatabilities(once); rows != nil {
		t.Errorf("grid run once: %d rows", len(rows))
	}
}

// TestRepeatabilityReport: the Repeatability table in report.md and the
// printed table, per-repetition cells and charts, sweeps of the first
// repetition only, and the rows through results.json.
func TestRepeatabilityReport(t *testing.T) {
	r := repeated(map[string][3]float64{
		"nooff":   {10, 11, 9},
		"sophon":  {5, 5, 5},
		"optimal": {5, 5.25, 4.9},
	})
	r.Repeatability = Repeatabilities(r)
	dir := t.TempDir()
	report, charts, err := WriteReport(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(report)
	text := string(b)
	for _, want := range []string{
		"- **Repeat:** every cell ran 3 times",
		"## 100mbit, 1 storage CPUs, repetition 1", "## 100mbit, 1 storage CPUs, repetition 3",
		"## 100mbit, 0.5 storage CPUs\n",
		"## Repeatability", "(epoch-time-100mbit-cpu1-rep2.svg)", "(epoch-time-100mbit-cpu0.5.svg)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for policy, want := range map[string]string{
		"nooff":   "100mbit, 1 storage CPUs|nooff|10.00 11.00 9.00|10.00|20.0|-|-",
		"optimal": "100mbit, 1 storage CPUs|optimal|5.00 5.25 4.90|5.05|6.9|+0.0% +5.0% -2.0%|YES",
	} {
		if got := mdRow(text, "## Repeatability", policy); got != want {
			t.Errorf("%s's repeatability row: got %q, want %q", policy, got, want)
		}
	}
	// Sweeps: the two storage CPU values of the first repetition, once.
	var sweeps []string
	for _, ch := range charts {
		if strings.HasPrefix(filepath.Base(ch), "sweep-") {
			sweeps = append(sweeps, filepath.Base(ch))
		}
	}
	if !slices.Equal(sweeps, []string{"sweep-cpus-100mbit.svg"}) {
		t.Errorf("sweeps %v", sweeps)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "sweep-cpus-100mbit.svg"))
	// nooff, sophon and optimal at 1 CPU, nooff at 0.5; not 3 x 3 + 1.
	if n := strings.Count(string(svg), `class="point"`); n != 4 {
		t.Errorf("the sweep draws %d points, want the first repetition's 4", n)
	}

	var tb strings.Builder
	if err := Table(&tb, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== 100mbit, 1 storage CPUs, repetition 2 ==", "== repeatability ==", "steady s per rep", "+5.0%"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}

	if _, err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := Load(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if back.Repeat != 3 || back.Cells[2].Repetition != 3 || len(back.Repeatability) != 3 || !back.Repeatability[2].SlowerThanSophon ||
		back.Repeatability[0].Spread != r.Repeatability[0].Spread {
		t.Errorf("read back: repeat %d, %+v", back.Repeat, back.Repeatability)
	}
}
