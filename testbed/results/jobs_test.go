package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportJobs: an experiment of several jobs gets the jobs' line and,
// per cell, every epoch by job (its share, time, bound, ratio and the
// sum), in the report and the printed table; one without jobs gets none.
func TestReportJobs(t *testing.T) {
	r := synthetic(testGrid[:1])
	r.StorageNodes, r.ComputeNodes, r.Mode = 1, 2, ModeNetns
	c := &r.Cells[0]
	for i := range c.Runs {
		for k := range c.Runs[i].Epochs {
			e := &c.Runs[i].Epochs[k]
			e.RankSeconds, e.JobBoundSeconds, e.JobShareCPUs = []float64{10, 12}, []float64{9.5, 12}, []float64{0.5, 0.5}
		}
	}
	plain := t.TempDir()
	if _, _, err := WriteReport(plain, r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(plain, "report.md"))
	if strings.Contains(string(b), "epoch s per job") || strings.Contains(string(b), "independent jobs") {
		t.Error("a report of ranks has the jobs' table")
	}

	r.Jobs = 2
	dir := t.TempDir()
	if _, _, err := WriteReport(dir, r); err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := Table(&text, r); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{
		"the compute agents ran as 2 independent jobs (--job job0..job1)",
		"epoch s per job",
		"| 0.50 / 0.50 ",
		"| 10.00 / 12.00 ",
		"| 9.50 / 12.00 ",
		"| 1.05 / 1.00 ",
		"22.00 |",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if !strings.Contains(text.String(), "jobs (every epoch; per job):") {
		t.Errorf("table lacks the jobs:\n%s", text.String())
	}
}
