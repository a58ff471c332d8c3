package dual

import "math"

// Oracle3 prices at weights w on the 2-simplex: it returns the dual value
// at w and its plan's loads on the three resources (a cut).
type Oracle3 func(w [3]float64) (float64, [3]float64)

// Result3 is what Simplex3 found.
type Result3 struct {
	W            [3]float64 // weights with the best dual value, Lower
	Found        bool       // whether some dual value beat -Inf (W is set)
	Lower, Upper float64    // best dual value; least model maximum
	Iters        int
}

// Simplex3 maximises a dual over the 2-simplex by Kelley's cutting planes:
// from each dimension's unit weights and uniform weights, each next point
// the model's maximiser by nested golden-section search (maximiseModel),
// until the model's maximum and the best dual value meet within tol
// (relative), the maximum is not positive, or maxIters iterations. The
// single-node planner's plans depend on it to the last bit.
func Simplex3(price Oracle3, tol float64, maxIters int) Result3 {
	r := Result3{Lower: math.Inf(-1), Upper: math.Inf(1)}
	var cuts [][3]float64
	eval := func(w [3]float64) {
		g, v := price(w)
		if g > r.Lower {
			r.Lower, r.W, r.Found = g, w, true
		}
		cuts = append(cuts, v)
	}
	for _, w := range [][3]float64{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1.0 / 3, 1.0 / 3, 1.0 / 3}} {
		eval(w)
	}
	for ; r.Iters < maxIters; r.Iters++ {
		w, ub := maximiseModel(cuts)
		r.Upper = min(r.Upper, ub)
		if r.Upper-r.Lower <= tol*r.Upper || r.Upper <= 0 {
			break
		}
		eval(w)
	}
	return r
}

// maximiseModel maximises the cutting-plane model min over cuts of w.v
// over the 2-simplex: outer golden-section search over w0, inner over w1
// (the inner maximum of a concave function is concave in w0), exact to
// ~1e-12 in w, which is ample as the model is concave and piecewise
// linear. It returns the point and the model's value there, an upper
// bound on the LP's optimum.
func maximiseModel(cuts [][3]float64) ([3]float64, float64) {
	at := func(w [3]float64) float64 {
		v := math.Inf(1)
		for _, c := range cuts {
			v = min(v, w[0]*c[0]+w[1]*c[1]+w[2]*c[2])
		}
		return v
	}
	inner := func(w0 float64) (float64, float64) {
		return goldenMax(func(w1 float64) float64 {
			return at([3]float64{w0, w1, max(0, 1-w0-w1)})
		}, 0, 1-w0)
	}
	w0, v := goldenMax(func(w0 float64) float64 { _, v := inner(w0); return v }, 0, 1)
	w1, _ := inner(w0)
	return [3]float64{w0, w1, max(0, 1-w0-w1)}, v
}

// goldenMax maximises a concave f on [lo, hi] by golden-section search.
func goldenMax(f func(float64) float64, lo, hi float64) (float64, float64) {
	const phi = 0.6180339887498949
	a, b := lo, hi
	x1, x2 := b-phi*(b-a), a+phi*(b-a)
	f1, f2 := f(x1), f(x2)
	for range 64 {
		if f1 < f2 {
			a, x1, f1 = x1, x2, f2
			x2 = a + phi*(b-a)
			f2 = f(x2)
		} else {
			b, x2, f2 = x2, x1, f1
			x1 = b - phi*(b-a)
			f1 = f(x1)
		}
	}
	// The endpoints matter when the maximum sits on the boundary.
	best, fb := x1, f1
	for _, x := range []float64{x2, lo, hi} {
		if fx := f(x); fx > fb {
			best, fb = x, fx
		}
	}
	return best, fb
}
