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
	set := CalibrationSet(shard, sizes, nil)
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
	if few := CalibrationSet(shard[:5], sizes, nil); len(few) != 5 {
		t.Errorf("a 5-sample shard: %d calibration samples, want all 5", len(few))
	}
	// Files that cannot calibrate (the smallest of all here) are passed
	// over, and the window reaches past them to keep its size.
	bad := map[uint64]bool{}
	for _, s := range shard[:4] {
		sizes[s], bad[s] = 0, true
	}
	set = CalibrationSet(shard, sizes, func(s uint64) bool { return !bad[s] })
	if len(set) != CalibrationSamples {
		t.Fatalf("with 4 unusable: %d calibration samples, want %d", len(set), CalibrationSamples)
	}
	for s := range set {
		if bad[s] {
			t.Errorf("unusable sample %d chosen", s)
		}
	}
	window := map[uint64]bool{}
	for _, s := range shard[4 : CalibrationWindow+4] {
		window[s] = true
	}
	for s := range set {
		if !window[s] {
			t.Errorf("sample %d chosen outside the first %d usable positions", s, CalibrationWindow)
		}
	}
}
