package cellbound

import (
	"runtime"
	"testing"

	"github.com/sophon-dl/sophon/testbed/results"
)

// TestComputeCores: the compute agent's workers from its flags, and the
// cell's bound plans with them within the compute quota.
func TestComputeCores(t *testing.T) {
	n := float64(runtime.NumCPU())
	for _, tc := range []struct {
		flags []string
		want  float64
	}{
		{nil, n},
		{[]string{"--window", "8"}, n},
		{[]string{"--workers", "3"}, 3},
		{[]string{"-workers=5", "--window", "8"}, 5},
		{[]string{"--workers=x"}, n},
	} {
		if got := ComputeCores(tc.flags); got != tc.want {
			t.Errorf("computeCores(%q): got %v, want %v", tc.flags, got, tc.want)
		}
	}
	// The cell's bound plans with the cores the agent's model takes: its
	// workers within the compute quota.
	quota := &results.Cell{ComputeCPUs: 1.5}
	if got := CellComputeCores(quota, []string{"--workers", "1"}); got != 1 {
		t.Errorf("1 worker under a 1.5-core quota: %v cores, want 1", got)
	}
	if got := CellComputeCores(quota, []string{"--workers", "4"}); got != 1.5 {
		t.Errorf("4 workers under a 1.5-core quota: %v cores, want 1.5", got)
	}
	if got := CellComputeCores(&results.Cell{}, []string{"--workers", "4"}); got != 4 {
		t.Errorf("4 workers, no quota: %v cores, want 4", got)
	}
}
