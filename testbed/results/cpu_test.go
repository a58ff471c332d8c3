package results

import (
	"strings"
	"testing"
)

// TestCellCPU: the report says each node's quota and the testbed's own
// CPU over the cell, and nothing for a cell that measured neither.
func TestCellCPU(t *testing.T) {
	c := &Cell{StorageCPUs: 0.5, ComputeCPUs: 1.5, TestbedCPUSeconds: 3, Seconds: 60}
	got := cellCPU(c)
	for _, want := range []string{"storage agent a quota of 0.5 cores", "compute agent (and the peer) 1.5 cores",
		"3.0 CPU-s over the cell's 60 s (0.05 cores), outside both quotas"} {
		if !strings.Contains(got, want) {
			t.Errorf("cellCPU = %q: want %q in it", got, want)
		}
	}
	if got := cellCPU(&Cell{StorageCPUs: 1, ComputeCPUs: 1, ComputeCPUsEach: 0.5}); !strings.Contains(got, "each job's compute agent a quota of its own of 0.5 cores (of 1)") {
		t.Errorf("jobs apart: %q, want each job's own quota", got)
	}
	if got := cellCPU(&Cell{StorageCPUs: 1}); got != "" {
		t.Errorf("a cell without quotas or testbed CPU: %q, want nothing", got)
	}
}
