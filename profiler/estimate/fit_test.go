package estimate

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }

func TestFits(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5}
	zs := []float64{2, 1, 4, 3, 7}
	line := make([]float64, len(xs))
	plane := make([]float64, len(xs))
	for i := range xs {
		line[i] = 10 + 3*xs[i]
		plane[i] = 10 + 3*xs[i] + 5*zs[i]
	}
	for _, tc := range []struct {
		name string
		got  linear
		want linear
	}{
		{"line", fit1(xs, line), linear{A: 10, B: 3}},
		{"plane", fit2(xs, zs, plane), linear{A: 10, B: 3, C: 5}},
		// A constant x cannot tell a slope from an intercept: the ratio.
		{"constant x", fit1([]float64{2, 2, 2}, []float64{4, 6, 8}), linear{B: 3}},
		// A falling line would give negative costs further out: the mean.
		{"falling", fit1(xs, []float64{5, 4, 3, 2, 1}), linear{A: 3}},
		// A negative intercept: through the origin.
		{"negative intercept", fit1(xs, []float64{0, 2, 4, 6, 8}), linear{B: 80.0 / 55}},
		{"collinear plane", fit2(xs, xs, line), linear{A: 10, B: 3}},
		{"empty", fit1(nil, nil), linear{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !near(tc.got.A, tc.want.A) || !near(tc.got.B, tc.want.B) || !near(tc.got.C, tc.want.C) {
				t.Errorf("got %+v, want %+v", tc.got, tc.want)
			}
		})
	}
}

func TestPick(t *testing.T) {
	var samples []Sample
	for i := range 100 {
		samples = append(samples, Sample{ID: uint64(i), Raw: int64(1000 + i), W: 100 + i, H: 100, Components: 3})
	}
	samples[50].Progressive = true
	got := Pick(samples, 4)
	// Quantiles 1/8, 3/8, 5/8, 7/8 of the sizes, and the one progressive
	// sample (its class has fewer than minClass).
	want := []int{12, 37, 50, 62, 87}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}
