package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportNodes: an experiment with several nodes gets the Nodes and
// Placements lines and, per cell, each run's last epoch by rank, storage
// link and storage agent, in the report and the printed table; one of 1 x
// 1 gets none of them.
func TestReportNodes(t *testing.T) {
	r := synthetic(testGrid[:1])
	plain := t.TempDir()
	if _, _, err := WriteReport(plain, r); err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := Table(&text, r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(plain, "report.md"))
	for _, no := range []string{"**Nodes", "**Placements", "**Reference", "per rank"} {
		if strings.Contains(string(b), no) || strings.Contains(text.String(), no) {
			t.Errorf("a 1 x 1 report has %q", no)
		}
	}

	r.StorageNodes, r.ComputeNodes, r.Mode = 2, 2, ModeNetns
	r.Placements, r.Reference = []string{"pull", "round-robin"}, "/x/nooff.samples"
	c := &r.Cells[0]
	c.StorageRates = []string{"400mbit", "100mbit"}
	e := &c.Runs[0].Epochs[len(c.Runs[0].Epochs)-1]
	e.RankSeconds, e.LinkBytes, e.StorageAgentCPUSeconds = []float64{9.5, 10}, []int64{60e6, 45e6}, []float64{1.25, 0.5}
	e.Seconds = 10
	dir := t.TempDir()
	if _, _, err := WriteReport(dir, r); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{
		"- **Nodes:** 2 storage x 2 compute nodes, a star of network namespaces",
		"; the compute agents ran as ranks 0..1 of one world",
		"- **Placements:** pull, round-robin: each policy ran once per placement",
		"- **Reference:** every run's tensors were compared with the 1 x 1 run's samples in `/x/nooff.samples`",
		"The storage links ran at 400mbit / 100mbit.",
		"| nooff  |                  10.00 | 9.50 / 10.00     | 60.0 / 45.0              | 1.25 / 0.50             |",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// One compute agent: no ranks to speak of.
	r.ComputeNodes = 1
	if s := topologyLine(r); !strings.HasPrefix(s, "2 storage x 1 compute nodes") || strings.Contains(s, "rank") {
		t.Errorf("2 x 1 line: %s", s)
	}
	// Only the runs with per-node figures get a row.
	if strings.Count(string(b), "/ 45.0") != 1 {
		t.Errorf("per-node rows: %d, want 1", strings.Count(string(b), "/ 45.0"))
	}
	text.Reset()
	if err := Table(&text, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "nooff     10.00  9.50 / 10.00  60.0 / 45.0  1.25 / 0.50") {
		t.Errorf("printed table lacks the per-node row:\n%s", text.String())
	}
}
