// Package lp is the restricted master LP of the cluster bound's
// cutting-plane search (package dual's Search, for package relax):
// a small dense revised simplex over the plans found so far. It is pure arithmetic: no I/O,
// goroutines or clock.
package lp

import "math"

// Master is the restricted master LP of the cluster bound's cutting-plane
// search, in its column form: given the resource loads v_k of plans
// k = 0..K-1 (each a column, over the active resource rows),
//
//	minimise T  subject to  sum_k lam_k v_k[r] - T + s_r = 0  for each row r,
//	                        sum_k lam_k = 1,  lam, s, T >= 0,
//
// i.e. the convex combination of the plans whose largest active load is
// smallest. Its duals on the rows are the resource weights w (w >= 0,
// sum w = 1) maximising min_k w.v_k, Kelley's model of the Lagrangian dual.
//
// It is a revised simplex with an explicit dense basis inverse (the rows
// are the few active resources plus one), refactorised every
// refactorEvery pivots, Dantzig's rule with Bland's rule after a run of
// degenerate pivots, so it cannot cycle. Adding a column keeps the basis
// (warm start); changing the rows starts again from the best single plan.
type Master struct {
	rows  []int32     // active resource ids
	cols  [][]float64 // per plan: its loads on rows, divided by scale
	scale float64

	m      int   // len(rows) + 1: the convexity row is last
	basis  []int // column ids: >= 0 a plan, colT the T column, <= -2 slack of row -2-id
	binv   []float64
	xb     []float64
	since  int // pivots since the last refactorisation
	u, y   []float64
	bland  bool
	stalls int
	// broken is set when even the initial basis could not be inverted
	// (loads too far apart for float64); the search then stops where it
	// is, which leaves the bound valid, only looser.
	broken bool
}

const (
	colT          = -1
	refactorEvery = 64
	masterTol     = 1e-11
)

func slackID(r int) int { return -2 - r }

// SetRows replaces the active rows, rebuilds every column from the plans'
// full load vectors and starts from the best single plan.
func (ms *Master) SetRows(rows []int32, plans [][]float64) {
	ms.rows = rows
	ms.cols = ms.cols[:0]
	for _, v := range plans {
		ms.AddCol(v)
	}
	ms.coldStart()
}

// AddCol appends a plan's column (its full load vector v, indexed by
// resource id); the basis stays valid.
func (ms *Master) AddCol(v []float64) {
	if ms.scale == 0 {
		ms.scale = 1
		if mx := MaxOf(v); mx > 0 {
			ms.scale = mx
		}
	}
	col := make([]float64, len(ms.rows))
	for i, r := range ms.rows {
		col[i] = v[r] / ms.scale
	}
	ms.cols = append(ms.cols, col)
}

// MaxOf is the largest of v, -Inf for none.
func MaxOf(v []float64) float64 {
	x := math.Inf(-1)
	for _, f := range v {
		x = max(x, f)
	}
	return x
}

// coldStart takes the plan with the smallest largest load: lam = 1 on it,
// T its largest load, and every slack but the largest row's basic.
func (ms *Master) coldStart() {
	ms.m = len(ms.rows) + 1
	best, bestT, arg := 0, math.Inf(1), 0
	for k, col := range ms.cols {
		t, a := math.Inf(-1), 0
		for r, x := range col {
			if x > t {
				t, a = x, r
			}
		}
		if t < bestT {
			best, bestT, arg = k, t, a
		}
	}
	ms.basis = ms.basis[:0]
	ms.basis = append(ms.basis, best, colT)
	for r := range len(ms.rows) {
		if r != arg {
			ms.basis = append(ms.basis, slackID(r))
		}
	}
	ms.bland, ms.stalls = false, 0
	// Its determinant is 1, so only extreme scales make this fail.
	ms.broken = !ms.invert()
}

// column writes column id into a (len m).
func (ms *Master) column(id int, a []float64) {
	clear(a)
	switch {
	case id >= 0:
		copy(a, ms.cols[id])
		a[ms.m-1] = 1
	case id == colT:
		for r := range ms.m - 1 {
			a[r] = -1
		}
	default:
		a[-2-id] = 1
	}
}

// refactor inverts the basis from scratch (Gauss-Jordan, partial
// pivoting) and recomputes the basic values. A numerically singular basis
// restarts from the best single plan, whose basis is never singular.
func (ms *Master) refactor() {
	if !ms.invert() {
		ms.coldStart()
	}
}

func (ms *Master) invert() bool {
	m := ms.m
	a := make([]float64, m*m) // the basis, row-major
	col := make([]float64, m)
	for j, id := range ms.basis {
		ms.column(id, col)
		for i := range m {
			a[i*m+j] = col[i]
		}
	}
	inv := make([]float64, m*m)
	for i := range m {
		inv[i*m+i] = 1
	}
	for c := range m {
		p, pv := -1, 0.0
		for r := c; r < m; r++ {
			if v := math.Abs(a[r*m+c]); v > pv {
				p, pv = r, v
			}
		}
		if pv < 1e-13 {
			return false
		}
		if p != c {
			for k := range m {
				a[p*m+k], a[c*m+k] = a[c*m+k], a[p*m+k]
				inv[p*m+k], inv[c*m+k] = inv[c*m+k], inv[p*m+k]
			}
		}
		d := 1 / a[c*m+c]
		for k := range m {
			a[c*m+k] *= d
			inv[c*m+k] *= d
		}
		for r := range m {
			if r == c {
				continue
			}
			f := a[r*m+c]
			if f == 0 {
				continue
			}
			for k := range m {
				a[r*m+k] -= f * a[c*m+k]
				inv[r*m+k] -= f * inv[c*m+k]
			}
		}
	}
	ms.binv = inv
	ms.xb = make([]float64, m)
	for i := range m {
		ms.xb[i] = max(inv[i*m+m-1], 0) // b = e_last
	}
	ms.u, ms.y = make([]float64, m), make([]float64, m)
	ms.since = 0
	return true
}

// duals computes y = c_B B^-1: the row of the inverse at T's position.
func (ms *Master) duals() {
	clear(ms.y)
	for p, id := range ms.basis {
		if id == colT {
			copy(ms.y, ms.binv[p*ms.m:(p+1)*ms.m])
		}
	}
}

// reduced is column id's reduced cost under ms.y.
func (ms *Master) reduced(id int) float64 {
	y := ms.y
	switch {
	case id >= 0:
		d := -y[ms.m-1]
		for r, x := range ms.cols[id] {
			d -= y[r] * x
		}
		return d
	case id == colT:
		d := 1.0
		for r := range ms.m - 1 {
			d += y[r]
		}
		return d
	}
	return -y[-2-id]
}

// entering is the column to enter the basis: the most negative reduced
// cost (Dantzig), or the first negative one in Bland's order (plans, T,
// slacks) after a run of degenerate pivots; found is false at the optimum.
func (ms *Master) entering(inBasis map[int]bool) (enter int, found bool) {
	m := ms.m
	best := -masterTol
	try := func(id int) bool {
		if inBasis[id] {
			return false
		}
		if d := ms.reduced(id); d < best {
			enter, found = id, true
			if ms.bland {
				return true
			}
			best = d
		}
		return false
	}
	// Bland's order: plans, T, slacks.
	done := false
	for k := range ms.cols {
		if try(k) {
			done = true
			break
		}
	}
	if !done && !try(colT) {
		for r := range m - 1 {
			if try(slackID(r)) {
				break
			}
		}
	}
	return enter, found
}

// leaving is the ratio test for column enter (written into a): the basis
// row to leave, -1 for none, and the step; ties go to Bland's order.
func (ms *Master) leaving(enter int, a []float64) (int, float64) {
	m := ms.m
	ms.column(enter, a)
	for i := range m {
		var s float64
		row := ms.binv[i*m : (i+1)*m]
		for k, x := range a {
			if x != 0 {
				s += row[k] * x
			}
		}
		ms.u[i] = s
	}
	leave, theta := -1, math.Inf(1)
	for i, ui := range ms.u {
		if ui <= masterTol {
			continue
		}
		t := ms.xb[i] / ui
		if t < theta-1e-15 || (math.Abs(t-theta) <= 1e-15 && leave >= 0 && blandOrder(ms.basis[i]) < blandOrder(ms.basis[leave])) {
			leave, theta = i, t
		}
	}
	return leave, theta
}

// Solve runs the simplex to optimality (or maxPivots pivots).
func (ms *Master) Solve() {
	if ms.broken {
		return
	}
	m := ms.m
	inBasis := map[int]bool{}
	maxPivots := 200*m + 20*len(ms.cols) + 1000
	a := make([]float64, m)
	for range maxPivots {
		if ms.since >= refactorEvery {
			ms.refactor()
			if ms.broken {
				return
			}
		}
		clear(inBasis)
		for _, id := range ms.basis {
			inBasis[id] = true
		}
		ms.duals()
		enter, found := ms.entering(inBasis)
		if !found {
			return
		}
		leave, theta := ms.leaving(enter, a)
		if leave < 0 {
			return // unbounded cannot happen (T >= 0 is minimised); stop
		}
		if theta <= 1e-15 {
			ms.stalls++
			if ms.stalls > 2*m {
				ms.bland = true
			}
		} else {
			ms.stalls, ms.bland = 0, false
		}
		ms.pivot(leave, enter, theta)
	}
}

func blandOrder(id int) int {
	switch {
	case id >= 0:
		return id
	case id == colT:
		return math.MaxInt32
	}
	return math.MaxInt32 + (-2 - id) + 1
}

// pivot brings column enter in at row p with step theta (ms.u holds
// B^-1 times the entering column).
func (ms *Master) pivot(p, enter int, theta float64) {
	m := ms.m
	up := ms.u[p]
	rowP := ms.binv[p*m : (p+1)*m]
	for k := range rowP {
		rowP[k] /= up
	}
	for i := range m {
		if i == p || ms.u[i] == 0 {
			continue
		}
		f := ms.u[i]
		row := ms.binv[i*m : (i+1)*m]
		for k := range row {
			row[k] -= f * rowP[k]
		}
		ms.xb[i] = max(ms.xb[i]-f*theta, 0)
	}
	ms.xb[p] = theta
	ms.basis[p] = enter
	ms.since++
}

// Value is the master's optimum T, in the loads' units.
func (ms *Master) Value() float64 {
	for p, id := range ms.basis {
		if id == colT {
			return ms.xb[p] * ms.scale
		}
	}
	return 0
}

// Lambdas returns the plans' weights (len = number of plans).
func (ms *Master) Lambdas() []float64 {
	lam := make([]float64, len(ms.cols))
	for p, id := range ms.basis {
		if id >= 0 {
			lam[id] = ms.xb[p]
		}
	}
	var s float64
	for _, l := range lam {
		s += l
	}
	if s > 0 {
		for k := range lam {
			lam[k] /= s
		}
	}
	return lam
}

// Weights returns the duals of the rows as weights on all nres
// resources: w >= 0, summing to 1 (zero off the active rows).
func (ms *Master) Weights(nres int) []float64 {
	ms.duals()
	w := make([]float64, nres)
	var s float64
	for r, id := range ms.rows {
		w[id] = max(-ms.y[r], 0)
		s += w[id]
	}
	if s <= 0 {
		for _, id := range ms.rows {
			w[id] = 1 / float64(len(ms.rows))
		}
		return w
	}
	for _, id := range ms.rows {
		w[id] /= s
	}
	return w
}

// Broken reports whether even the initial basis could not be inverted
// (loads too far apart for float64): the caller's search should stop
// where it is, which leaves its bound valid, only looser.
func (ms *Master) Broken() bool { return ms.broken }

// Basis is the basis' column ids: the plans' indices (in the order they
// were added since the last SetRows) for basic plans, negative ids for the
// T column and slacks. The caller must not modify it.
func (ms *Master) Basis() []int { return ms.basis }
