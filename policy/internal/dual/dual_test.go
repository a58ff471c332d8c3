package dual

import (
	"math"
	"testing"
)

// plans is a finite LP: each plan loads one resource by 2, so the best mix
// takes each a third (largest load 2/3), and the dual's optimum is uniform
// weights, of the same value.
var plans = [][]float64{{2, 0, 0}, {0, 2, 0}, {0, 0, 2}}

// cheapest is the Lagrangian at w: the plan of least w-weighted load.
func cheapest(w []float64) (float64, int) {
	best, k := math.Inf(1), 0
	for i, v := range plans {
		if g := w[0]*v[0] + w[1]*v[1] + w[2]*v[2]; g < best {
			best, k = g, i
		}
	}
	return best, k
}

func TestSearch(t *testing.T) {
	s := NewSearch(3)
	s.Run(func(w []float64) (float64, *Cut) {
		g, k := cheapest(w)
		return g, &Cut{Loads: plans[k], Choice: []uint16{uint16(k)}}
	}, 1e-9)
	sol := s.Sol
	if math.Abs(sol.Lower-2.0/3) > 1e-9 || math.Abs(sol.Upper-2.0/3) > 1e-9 {
		t.Fatalf("bounds [%v, %v], want 2/3", sol.Lower, sol.Upper)
	}
	var sum float64
	for _, l := range sol.Lam {
		sum += l
	}
	if math.Abs(sum-1) > 1e-9 || len(sol.Cuts) != 3 {
		t.Fatalf("fractional plan: %d cuts, weights sum %v", len(sol.Cuts), sum)
	}
	s.Remap([]int32{0, 0})
	for _, c := range s.Sol.Cuts {
		if len(c.Choice) != 2 || c.Choice[0] != c.Choice[1] {
			t.Fatalf("remapped choice %v", c.Choice)
		}
	}
}

func TestSimplex3(t *testing.T) {
	r := Simplex3(func(w [3]float64) (float64, [3]float64) {
		g, k := cheapest(w[:])
		return g, [3]float64(plans[k])
	}, 1e-9, 200)
	if !r.Found || math.Abs(r.Lower-2.0/3) > 1e-9 || math.Abs(r.Upper-r.Lower) > 1e-9 {
		t.Fatalf("got %+v, want 2/3", r)
	}
}

func TestGoldenMax(t *testing.T) {
	x, f := goldenMax(func(x float64) float64 { return -(x - 0.3) * (x - 0.3) }, 0, 1)
	if math.Abs(x-0.3) > 1e-6 || f > 0 {
		t.Fatalf("max at %v (%v), want 0.3", x, f)
	}
	// On the boundary.
	if x, _ := goldenMax(func(x float64) float64 { return x }, 0, 1); x != 1 {
		t.Fatalf("max at %v, want 1", x)
	}
}
