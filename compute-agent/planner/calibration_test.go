package planner

import (
	"slices"
	"testing"
)

// TestCalibrationSet: the first epoch's calibration samples are the
// CalibrationSamples smallest files of the shard's first
// CalibrationWindow positions, whatever comes after them.
func TestCalibrationSet(t *testing.T) {
	n := CalibrationWindow + 10
	sizes := make([]uint64, n)
	shard := make([]uint64, n)
	for i := range n {
		shard[i] = uint64(n - 1 - i) // ids in reverse
		sizes[i] = uint64(1000 + (i*7919)%1000)
	}
	sizes[shard[n-1]] = 1 // the smallest file, past the window
	set := CalibrationSet(shard, sizes)
	if len(set) != CalibrationSamples {
		t.Fatalf("%d calibration samples, want %d", len(set), CalibrationSamples)
	}
	var in, out []uint64
	for _, s := range shard[:CalibrationWindow] {
		if set[s] {
			in = append(in, sizes[s])
		} else {
			out = append(out, sizes[s])
		}
	}
	if len(in) != CalibrationSamples || slices.Max(in) > slices.Min(out) {
		t.Errorf("chosen sizes %v, left %v: want the smallest of the window", in, out)
	}
	if few := CalibrationSet(shard[:5], sizes); len(few) != 5 {
		t.Errorf("a 5-sample shard: %d calibration samples, want all 5", len(few))
	}
}
