package results

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// wanGrid is synthetic's first cell at three round trips on the delay
// line (0.1% loss), its nodes on cubic.
func wanGrid() *Results {
	r := synthetic([]testCell{testGrid[0], testGrid[0], testGrid[0]})
	r.CongestionControl = "cubic"
	for i, rtt := range []float64{0, 20, 80} {
		c := &r.Cells[i]
		c.DelayLine, c.RTTMs, c.Loss, c.CongestionControl = true, rtt, 0.001, "cubic"
	}
	return r
}

// TestWANCells: a cell on the delay line is named for its round trip and
// loss wherever the report names it, a grid of round trips charts epoch
// time against them, the congestion control is said once, and
// results.json carries rtt_ms, jitter_ms and loss per cell.
func TestWANCells(t *testing.T) {
	r := wanGrid()
	if got, want := r.Cells[1].Link(), "500mbit, rtt 20ms, loss 0.1%"; got != want {
		t.Errorf("link %q, want %q", got, want)
	}
	if got := (&Cell{Rate: "500mbit"}).Link(); got != "500mbit" {
		t.Errorf("veth link %q, want the rate alone", got)
	}
	dir := t.TempDir()
	md, charts, err := WriteReport(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, want := range []string{
		"## 500mbit, rtt 0ms, loss 0.1%, 0.5 storage CPUs", "## 500mbit, rtt 80ms, loss 0.1%, 0.5 storage CPUs",
		"**TCP congestion control:** cubic in both nodes' namespaces (--cc)",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	var names []string
	for _, ch := range charts {
		names = append(names, filepath.Base(ch))
	}
	for _, want := range []string{"sweep-rtt-500mbit-0.5-storage-cpus.svg", "epoch-time-500mbit-rtt20ms-cpu0.5.svg"} {
		if !slices.Contains(names, want) {
			t.Errorf("charts %v lack %s", names, want)
		}
	}
	r.CongestionControl = ""
	if got := congestionLine(r); got != "cubic (the host's default)" {
		t.Errorf("without --cc: %q", got)
	}
	path, err := Write(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cells []map[string]any `json:"cells"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if c := doc.Cells[2]; c["rtt_ms"] != 80.0 || c["jitter_ms"] != 0.0 || c["loss"] != 0.001 || c["delay_line"] != true || c["congestion_control"] != "cubic" {
		t.Errorf("results.json cell %v", c)
	}
}
