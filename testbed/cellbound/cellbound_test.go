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

// TestStorageSpeed: the bound's storage speed is the fastest steady
// epoch's of the cell's policy runs, at least 1; the peer's and the
// training rows' do not count, nor a run's earlier epochs.
func TestStorageSpeed(t *testing.T) {
	run := func(policy string, training bool, speeds ...float64) results.Run {
		r := results.Run{Policy: policy, Training: training}
		for i, s := range speeds {
			r.Epochs = append(r.Epochs, results.Epoch{Epoch: i, Prediction: &results.Prediction{StorageSpeed: s}})
		}
		return r
	}
	for _, tc := range []struct {
		name string
		runs []results.Run
		want float64
	}{
		{"no runs", nil, 1},
		{"every run slower than the profile's clock", []results.Run{run("optimal", false, 0.7, 0.8), run("sophon", false, 0.9)}, 1},
		{"the fastest steady epoch", []results.Run{run("optimal", false, 1.3, 1.18), run("sophon", false, 1.09), run("nooff", false)}, 1.18},
		{"peer and training rows left out", []results.Run{run("optimal", false, 1.1), run(results.PeerPolicy, false, 2), run("optimal", true, 3)}, 1.1},
	} {
		if got := StorageSpeed(&results.Cell{Runs: tc.runs}); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
