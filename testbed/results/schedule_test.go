package results

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// TestScheduleReport: a rate schedule's changes and the agent's re-splits
// come out in the report's Rate schedule table, a row per epoch that had
// either, and survive results.json; without a schedule or re-splits there
// is no section.
func TestScheduleReport(t *testing.T) {
	r := synthetic(testGrid[:1])
	if text := writeReportText(t, r); strings.Contains(text, "## Rate schedule") {
		t.Errorf("a report without a schedule has its section")
	}
	r.RateSchedule = "0s:100mbit,3s:50mbit,6s:100mbit"
	c := &r.Cells[0]
	var run *Run
	for i := range c.Runs {
		if c.Runs[i].Policy == "sophon" {
			run = &c.Runs[i]
		}
	}
	last := &run.Epochs[len(run.Epochs)-1]
	run.RateChanges = []RateChange{{Epoch: last.Epoch, Rate: "50mbit", PlannedSeconds: 3, AtSeconds: 3.05}, {Epoch: last.Epoch, Rate: "100mbit", PlannedSeconds: 6, AtSeconds: 6.02}}
	last.Resplits = []report.Resplit{{AtSeconds: 4.4, Kind: report.ResplitLink, MeasuredBytesPerSec: 6.1e6, PlanBytesPerSec: 12.2e6, NewBytesPerSec: 6.1e6, PredictedRemainingSeconds: 3.5,
		Reason: "link 6100000 B/s for 1s, under the plan"}}
	text := writeReportText(t, r)
	for _, want := range []string{"- **Rate schedule:** 0s:100mbit,3s:50mbit,6s:100mbit", "## Rate schedule", "`0s:100mbit,3s:50mbit,6s:100mbit`"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	row := mdRow(text, "## Rate schedule", "sophon")
	if !strings.Contains(row, "50mbit @ 3.05; 100mbit @ 6.02|link @ 4.40: 6.10 of 12.20, new 6.10, 3.50 left") {
		t.Errorf("sophon's row %q", row)
	}
	if row := mdRow(text, "## Rate schedule", "nooff"); row != "" {
		t.Errorf("nooff, with no change, has a row: %s", row)
	}
	if !strings.Contains(text, "link @ 4.40 s: link 6100000 B/s for 1s, under the plan") {
		t.Errorf("report lacks the re-split's reason")
	}
	dir := t.TempDir()
	if _, err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := Load(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if back.RateSchedule != r.RateSchedule {
		t.Errorf("read back schedule %q", back.RateSchedule)
	}
}

func writeReportText(t *testing.T, r *Results) string {
	t.Helper()
	path, _, err := WriteReport(t.TempDir(), r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestResplitGain: a policy and its "-noresplit" row in the same cell
// compare over the epochs with a rate change, across repetitions, pair
// by pair; a policy without such a row, epochs without a change and a
// run that profiled (with its pair) are left out.
func TestResplitGain(t *testing.T) {
	mk := func(rep int, policy string, secs ...float64) Run {
		run := Run{Policy: policy}
		for i, s := range secs {
			run.Epochs = append(run.Epochs, Epoch{Epoch: i, Seconds: s})
			if i > 0 {
				run.RateChanges = append(run.RateChanges, RateChange{Epoch: i, Rate: "50mbit"})
			}
		}
		return run
	}
	profiled := mk(0, "optimal-noresplit", 60, 20, 20)
	profiled.Epochs[0].Profiled = true
	r := &Results{Cells: []Cell{
		{Rate: "100mbit", StorageCPUs: 0.4, Repetition: 1, Runs: []Run{mk(1, "optimal-noresplit", 60, 13, 14), mk(1, "optimal", 11, 12, 13), mk(1, "sophon", 11, 12)}},
		{Rate: "100mbit", StorageCPUs: 0.4, Repetition: 2, Runs: []Run{mk(2, "optimal-noresplit", 11, 12, 13), mk(2, "optimal", 11, 12.5, 13.5)}},
		{Rate: "100mbit", StorageCPUs: 0.4, Repetition: 3, Runs: []Run{profiled, mk(3, "optimal", 11, 12, 13)}},
	}}
	rows := resplitGainTable(r)
	if len(rows) != 1 {
		t.Fatalf("rows %q, want optimal's only", rows)
	}
	want := []string{"100mbit, 0.4 storage CPUs", "optimal", "4", "12.75", "13.00", "-1.9", "2 of 4"}
	if strings.Join(rows[0], "|") != strings.Join(want, "|") {
		t.Errorf("row %q, want %q", rows[0], want)
	}
}
