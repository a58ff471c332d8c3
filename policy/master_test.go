package policy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// checkMaster verifies the master's optimum by its certificate: lam is a
// convex combination whose largest row load is T, w a point of the
// simplex at which every plan costs at least T (so no combination does
// better than T: strong duality).
func checkMaster(t *testing.T, ms *master, plans [][]float64, nres int) {
	t.Helper()
	T := ms.value()
	lam := ms.lambdas()
	w := ms.weights(nres)
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
		ms := &master{}
		ms.setRows(rows, plans)
		ms.solve()
		checkMaster(t, ms, plans, nres)
		inc := &master{}
		inc.setRows(rows, plans[:1])
		inc.solve()
		for k := 1; k < len(plans); k++ {
			inc.addCol(plans[k])
			inc.solve()
		}
		checkMaster(t, inc, plans, nres)
		if a, b := ms.value(), inc.value(); math.Abs(a-b) > 1e-9*max(1, a) {
			t.Errorf("trial %d: cold %v, warm %v", trial, a, b)
		}
	}
	// Two plans, two resources: (2, 0) and (0, 1) mix as 1/3, 2/3 at
	// T = 2/3; the weights are (1/3, 2/3).
	ms := &master{}
	ms.setRows([]int32{0, 1}, [][]float64{{2, 0}, {0, 1}})
	ms.solve()
	if lam, w := ms.lambdas(), ms.weights(2); !near(ms.value(), 2.0/3) || !near(lam[0], 1.0/3) || !near(w[0], 1.0/3) {
		t.Errorf("T %v, lam %v, w %v; want 2/3, (1/3, 2/3), (1/3, 2/3)", ms.value(), lam, w)
	}
}
