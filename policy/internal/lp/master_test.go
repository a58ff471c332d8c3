package lp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// checkMaster verifies the master's optimum by its certificate: lam is a
// convex combination whose largest row load is T, w a point of the
// simplex at which every plan costs at least T (so no combination does
// better than T: strong duality).
func checkMaster(t *testing.T, ms *Master, plans [][]float64, nres int) {
	t.Helper()
	T := ms.Value()
	lam := ms.Lambdas()
	w := ms.Weights(nres)
	var sum, wsum float64
	mixed := make([]float64, nres)
	for k, l := range lam {
		if l < -1e-12 {
			t.Fatalf("lam[%d] = %v", k, l)
		}
		sum += l
		for r, x := range plans[k] {
			mixed[r] += l * x
		}
	}
	top := 0.0
	for _, r := range ms.rows {
		top = max(top, mixed[r])
	}
	for _, x := range w {
		if x < 0 {
			t.Fatalf("negative weight %v", x)
		}
		wsum += x
	}
	low := math.Inf(1)
	for _, v := range plans {
		low = min(low, dot(w, v))
	}
	tol := 1e-9 * max(1, T)
	if math.Abs(sum-1) > 1e-9 || math.Abs(wsum-1) > 1e-9 || math.Abs(top-T) > tol || math.Abs(low-T) > tol {
		t.Errorf("T %v: sum lam %v, sum w %v, largest mixed load %v, cheapest plan under w %v", T, sum, wsum, top, low)
	}
}

func TestMaster(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for trial := range 300 {
		nres := 1 + rng.IntN(8)
		var plans [][]float64
		for range 1 + rng.IntN(30) {
			v := make([]float64, nres)
			for r := range v {
				switch rng.IntN(5) {
				case 0:
					v[r] = 0
				case 1:
					v[r] = 1 // ties make degenerate vertices
				default:
					v[r] = math.Exp(2 * rng.NormFloat64())
				}
			}
			plans = append(plans, v)
			if rng.IntN(4) == 0 {
				plans = append(plans, v) // a repeated plan
			}
		}
		rows := make([]int32, nres)
		for r := range rows {
			rows[r] = int32(r)
		}
		// All at once, and one plan at a time with warm starts: the same
		// optimum.
		ms := &Master{}
		ms.SetRows(rows, plans)
		ms.Solve()
		checkMaster(t, ms, plans, nres)
		inc := &Master{}
		inc.SetRows(rows, plans[:1])
		inc.Solve()
		for k := 1; k < len(plans); k++ {
			inc.AddCol(plans[k])
			inc.Solve()
		}
		checkMaster(t, inc, plans, nres)
		if a, b := ms.Value(), inc.Value(); math.Abs(a-b) > 1e-9*max(1, a) {
			t.Errorf("trial %d: cold %v, warm %v", trial, a, b)
		}
	}
	// Two plans, two resources: (2, 0) and (0, 1) mix as 1/3, 2/3 at
	// T = 2/3; the weights are (1/3, 2/3).
	ms := &Master{}
	ms.SetRows([]int32{0, 1}, [][]float64{{2, 0}, {0, 1}})
	ms.Solve()
	if lam, w := ms.Lambdas(), ms.Weights(2); !near(ms.Value(), 2.0/3) || !near(lam[0], 1.0/3) || !near(w[0], 1.0/3) {
		t.Errorf("T %v, lam %v, w %v; want 2/3, (1/3, 2/3), (1/3, 2/3)", ms.Value(), lam, w)
	}
}

func dot(a, b []float64) float64 {
	var s float64
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b)) }
