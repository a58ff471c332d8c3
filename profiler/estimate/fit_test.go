package estimate

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }

func TestFit(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6}
	zs := []float64{2, 1, 4, 3, 7, 5}
	ws := []float64{1, 1, 0, 2, 1, 3}
	line := make([]float64, len(xs))
	plane := make([]float64, len(xs))
	cube := make([]float64, len(xs))
	for i := range xs {
		line[i] = 10 + 3*xs[i]
		plane[i] = 10 + 3*xs[i] + 5*zs[i]
		cube[i] = 10 + 3*xs[i] + 5*zs[i] + 7*ws[i]
	}
	for _, tc := range []struct {
		name string
		got  linear
		want linear
	}{
		{"line", fit(line, xs), linear{A: 10, B: []float64{3}}},
		{"plane", fit(plane, xs, zs), linear{A: 10, B: []float64{3, 5}}},
		{"three features", fit(cube, xs, zs, ws), linear{A: 10, B: []float64{3, 5, 7}}},
		// A constant x cannot tell a slope from an intercept: the ratio.
		{"constant x", fit([]float64{4, 6, 8}, []float64{2, 2, 2}), linear{B: []float64{3}}},
		// A falling line would give negative costs further out: the
		// feature is dropped, leaving the mean.
		{"falling", fit([]float64{6, 5, 4, 3, 2, 1}, xs), linear{A: 3.5, B: []float64{0}}},
		// A negative intercept: through the origin.
		{"negative intercept", fit([]float64{0, 2, 4, 6, 8, 10}, xs), linear{B: []float64{140.0 / 91}}},
		// A second feature collinear with the first is dropped.
		{"collinear", fit(line, xs, xs), linear{A: 10, B: []float64{3, 0}}},
		// A feature that does not matter gets a zero term.
		{"unused feature", fit(line, xs, []float64{0, 0, 0, 0, 0, 1}), linear{A: 10, B: []float64{3, 0}}},
		{"no features", fit([]float64{1, 3}), linear{A: 2}},
		{"empty", fit(nil, nil), linear{B: []float64{0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := near(tc.got.A, tc.want.A) && len(tc.got.B) == len(tc.want.B)
			for j := range tc.want.B {
				ok = ok && near(tc.got.B[j], tc.want.B[j])
			}
			if !ok {
				t.Errorf("got %+v, want %+v", tc.got, tc.want)
			}
		})
	}
}

// TestFitDropsNegative: a feature whose term comes out negative is
// dropped, wherever it is in the list, and the others are kept, as a cost
// must not fall as work grows.
func TestFitDropsNegative(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6}
	ws := []float64{1, 0, 1, 0, 0, 0}
	zs := []float64{2, 1, 4, 3, 7, 5}
	y := make([]float64, len(xs))
	for i := range xs {
		y[i] = 10 + 3*xs[i] - 2*ws[i] + 5*zs[i]
	}
	l := fit(y, xs, ws, zs)
	if len(l.B) != 3 || l.B[0] <= 0 || l.B[1] != 0 || l.B[2] <= 0 || l.A < 0 {
		t.Errorf("got %+v, want the second term zero and the others positive", l)
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
