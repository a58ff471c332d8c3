package results

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// contendedRun is a run of four epochs whose last two were contended.
func contendedRun(policy string, secs [4]float64, predicted float64) Run {
	run := Run{Policy: policy, ExactlyOnce: true, ContentMatches: true}
	for i, s := range secs {
		run.Epochs = append(run.Epochs, Epoch{Epoch: i, Seconds: s, Samples: 100})
	}
	run.Contention = &Contention{AfterEpochs: 2, FromEpoch: 2, LagSeconds: 0.04, Threads: 1,
		HogCPUSeconds: 1.2, HogSeconds: 3, HogCores: 0.4, StorageCoresLeft: 0.6, PredictedSeconds: predicted}
	return run
}

func TestScoreContention(t *testing.T) {
	c := Cell{Rate: "100mbit", RateBitsPerSec: 1e8, StorageCPUs: 1, Runs: []Run{
		contendedRun("nooff", [4]float64{12, 10, 10.2, 10}, 0),
		// Within 10% of its prediction, the lesser.
		contendedRun("sophon", [4]float64{9, 5, 8.5, 8.7}, 8),
		// Its prediction above nooff's: nooff's epoch is the reference.
		contendedRun("optimal", [4]float64{9, 5, 10.9, 10}, 12),
		// Over 10%: the slowest contended epoch decides, not the last.
		contendedRun("fastflow", [4]float64{9, 5, 9.5, 8.1}, 8),
		// Failed: no verdict even within the target.
		contendedRun("alloff", [4]float64{9, 5, 8, 8}, 8),
		// No prediction: nooff alone.
		contendedRun("resizeoff", [4]float64{9, 5, 10.5, 10.5}, 0),
		// Before the contended epochs, anything goes: epoch 1 is slow.
		contendedRun("sophon-nowc", [4]float64{9, 50, 8, 8}, 8),
	}}
	c.Runs[4].Error = "storage agent: connection reset"
	c.Runs[5].Contention.PredictionError = "no profile"
	for i := range 2 { // idempotent
		ScoreContention(&c)
		for _, tc := range []struct {
			policy     string
			ref, worst float64
			epoch      int
			holds      bool
		}{
			{"nooff", 10, 10.2, 2, true},
			{"sophon", 8, 8.7, 3, true},
			{"optimal", 10, 10.9, 2, true},
			{"fastflow", 8, 9.5, 2, false},
			{"alloff", 8, 8, 2, false},
			{"resizeoff", 10, 10.5, 2, true},
			{"sophon-nowc", 8, 8, 2, true},
		} {
			var k *Contention
			for j := range c.Runs {
				if c.Runs[j].Policy == tc.policy {
					k = c.Runs[j].Contention
				}
			}
			if k.NoOffSeconds != 10 || k.ReferenceSeconds != tc.ref || k.WorstSeconds != tc.worst || k.WorstEpoch != tc.epoch ||
				math.Abs(k.Ratio-tc.worst/tc.ref) > 1e-12 || k.Holds != tc.holds {
				t.Errorf("pass %d, %s: nooff %v, reference %v, worst %v (epoch %d), ratio %v, holds %v; want reference %v, worst %v (epoch %d), holds %v",
					i, tc.policy, k.NoOffSeconds, k.ReferenceSeconds, k.WorstSeconds, k.WorstEpoch, k.Ratio, k.Holds, tc.ref, tc.worst, tc.epoch, tc.holds)
			}
		}
	}

	// Exactly 10% over holds, whatever the float rounding.
	edge := Cell{Runs: []Run{contendedRun("sophon", [4]float64{1, 1, 1.1, 1.1}, 1)}}
	ScoreContention(&edge)
	if k := edge.Runs[0].Contention; !k.Holds {
		t.Errorf("ratio %v: does not hold", k.Ratio)
	}
	// No nooff and no prediction: no reference, no verdict.
	lone := Cell{Runs: []Run{contendedRun("sophon", [4]float64{1, 1, 1, 1}, 0)}}
	ScoreContention(&lone)
	if k := lone.Runs[0].Contention; k.ReferenceSeconds != 0 || k.Ratio != 0 || k.Holds {
		t.Errorf("no reference: %+v", k)
	}
}

// TestContentionReport: the Contention table in report.md and the printed
// table, and the fields through results.json.
func TestContentionReport(t *testing.T) {
	r := synthetic(testGrid[:1])
	r.ContendAt, r.ContendThreads = 0.5, 2
	c := &r.Cells[0]
	for i := range c.Runs {
		if c.Runs[i].Policy == PeerPolicy {
			continue
		}
		c.Runs[i].Contention = &Contention{AfterEpochs: 1, FromEpoch: 2, LagSeconds: 0.031, IntoEpochSeconds: -0.02, Threads: 2,
			HogCPUSeconds: 2.5, HogSeconds: 5, HogCores: 0.5, StorageCoresLeft: 0, PredictedSeconds: 4.2}
	}
	ScoreContention(c)
	dir := t.TempDir()
	report, _, err := WriteReport(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(report)
	text := string(b)
	for _, want := range []string{
		"- **Contention:** a CPU hog of 2 busy threads in the storage agent's cgroup, started in each policy run once floor(0.5 x 3) = 1 epochs were done",
		"## Contention", "| reduced-CPU prediction s |", "| worst/reference |", "| within 10% |",
		// sophon: 4 s against min(nooff 10 s, 4.2 s).
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for policy, want := range map[string]string{
		// sophon: 4 s against min(nooff 10 s, 4.2 s).
		"sophon": "500mbit, 0.5 storage CPUs|sophon|2|0.03|-0.02|0.50|0.00|4.20|10.00|4.20|4.00 (epoch 2)|0.95|yes|",
		// nooff: 10 s against 4.2 s.
		"nooff": "500mbit, 0.5 storage CPUs|nooff|2|0.03|-0.02|0.50|0.00|4.20|10.00|4.20|10.00 (epoch 2)|2.38|NO|",
	} {
		if got := mdRow(text, "## Contention", policy); got != want {
			t.Errorf("%s's contention row: got %q, want %q", policy, got, want)
		}
	}
	if row := mdRow(text, "## Contention", PeerPolicy); row != "" {
		t.Errorf("the peer, which had no hog, has a contention row: %s", row)
	}
	var tb strings.Builder
	if err := Table(&tb, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== contention ==", "reduced pred s", "within 10%"} {
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
	k := back.Cells[0].Runs[4].Contention
	if back.ContendAt != 0.5 || back.ContendThreads != 2 || k == nil || k.FromEpoch != 2 || k.HogCores != 0.5 ||
		k.PredictedSeconds != 4.2 || k.ReferenceSeconds != 4 && k.ReferenceSeconds != 4.2 || !k.Holds {
		t.Errorf("read back: contend at %v x %d, %+v", back.ContendAt, back.ContendThreads, k)
	}
}

// TestNewFieldsOmitted: results without the new options write the same
// keys as before, so older readers see no change.
func TestNewFieldsOmitted(t *testing.T) {
	b, err := json.Marshal(synthetic(testGrid))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"repeat", "work_conserving", "contend_at", "contend_threads", "repetition",
		"repeatability", "work_conserving_off", "contention"} {
		if strings.Contains(string(b), `"`+key+`"`) {
			t.Errorf("results.json has %q without the option", key)
		}
	}
	// And a file from before them loads.
	old := `{"version":1,"mode":"netns","epochs":2,"cells":[{"rate":"100mbit","storage_cpus":1,"runs":[{"policy":"nooff","epochs":[{"epoch":0,"seconds":3}]}]}]}`
	path := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cells[0].Runs[0].Contention != nil || r.Repeat != 0 || len(r.Repeatability) != 0 {
		t.Errorf("old file: %+v", r)
	}
	if _, _, err := WriteReport(t.TempDir(), r); err != nil {
		t.Fatal(err)
	}
}

// mdRow is the markdown table row under heading whose second cell is key,
// its cells trimmed and joined with "|"; "" when there is none.
func mdRow(text, heading, key string) string {
	i := strings.Index(text, heading)
	if i < 0 {
		return ""
	}
	for _, line := range strings.Split(text[i:], "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 2 || strings.TrimSpace(cells[1]) != key {
			continue
		}
		for k := range cells {
			cells[k] = strings.TrimSpace(cells[k])
		}
		return strings.Join(cells, "|")
	}
	return ""
}
