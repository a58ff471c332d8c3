package profiler

import (
	"math"
	"testing"
)

func TestMeasuredResourcesUpdate(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*max(1, math.Abs(b)) }
	var m MeasuredResources
	// The first epoch sets every measured field; the GPU was not measured.
	m.Update(MeasuredResources{LinkBytesPerSec: 100, StorageSpeed: 0.8, StorageCores: 4, ComputeCores: 8, Epochs: 7}, 1)
	want := MeasuredResources{LinkBytesPerSec: 100, StorageSpeed: 0.8, StorageCores: 4, ComputeCores: 8, Epochs: 1}
	if m != want {
		t.Fatalf("after one epoch: got %+v, want %+v", m, want)
	}
	// Two more epochs: plain means over the three. The GPU appears in the
	// second and takes its value outright; NaN and +Inf are not measured.
	m.Update(MeasuredResources{LinkBytesPerSec: 130, StorageSpeed: 1, StorageCores: 4, ComputeCores: math.NaN(), GPUSamplesPerSec: 900}, 1)
	m.Update(MeasuredResources{LinkBytesPerSec: 70, StorageSpeed: 0.9, StorageCores: math.Inf(1), ComputeCores: 2, GPUSamplesPerSec: 1200}, 1)
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"link", m.LinkBytesPerSec, 100},
		{"speed", m.StorageSpeed, 0.9},
		{"storage cores", m.StorageCores, 4},
		{"compute cores", m.ComputeCores, (8*2 + 2) / 3.0},
		{"gpu", m.GPUSamplesPerSec, (900*2 + 1200) / 3.0},
		{"epochs", m.Epochs, 3},
	} {
		if !near(f.got, f.want) {
			t.Errorf("%s: got %v, want %v", f.name, f.got, f.want)
		}
	}
	// A half epoch weighs half as much.
	m = MeasuredResources{LinkBytesPerSec: 100, Epochs: 1}
	m.Update(MeasuredResources{LinkBytesPerSec: 400}, 0.5)
	if !near(m.LinkBytesPerSec, 200) || !near(m.Epochs, 1.5) {
		t.Errorf("half epoch: got %+v, want link 200 over 1.5 epochs", m)
	}
	// Weights that are not positive and finite change nothing.
	before := m
	for _, w := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		m.Update(MeasuredResources{LinkBytesPerSec: 1}, w)
		if m != before {
			t.Errorf("weight %v: got %+v, want %+v", w, m, before)
		}
	}
	// Fields set but no weight behind them: the observation replaces them.
	m = MeasuredResources{LinkBytesPerSec: 5, ComputeCores: 3}
	m.Update(MeasuredResources{LinkBytesPerSec: 9}, 2)
	if want := (MeasuredResources{LinkBytesPerSec: 9, ComputeCores: 3, Epochs: 2}); m != want {
		t.Errorf("no prior weight: got %+v, want %+v", m, want)
	}
}
