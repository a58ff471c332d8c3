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
	last.Resplits = []report.Resplit{{AtSeconds: 4.4, Kind: report.ResplitLink, MeasuredBytesPerSec: 6.1e6, PlanBytesPerSec: 12.2e6, NewBytesPerSec: 6.1e6, PredictedRemainingSeconds: 3.5}}
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
