package estimate

// linear is y = A + B[0]*x[0] + B[1]*x[1] + ... with every term
// non-negative: a cost or a size as a function of a few features of a
// sample.
type linear struct {
	A float64
	B []float64
}

func (l linear) at(x ...float64) float64 {
	y := l.A
	for i, b := range l.B {
		if i < len(x) {
			y += b * x[i]
		}
	}
	return y
}

// fit is the least-squares fit of y on the features xs[0], xs[1], ...
// (each a column, one value per calibration sample) and an intercept, with
// every term non-negative, in the manner of an active-set non-negative
// least squares: where a term comes out negative it drops the feature
// whose term contributes most negatively (B[j] times the feature's mean)
// and solves again over the others; where the calibration cannot
// determine the fit (fewer samples than terms, a feature that does not
// vary or is collinear with the others) or only the intercept comes out
// negative, it drops the last feature still in. A dropped feature's term is zero. With one feature left that the
// fit still cannot use, it falls back to the line through the origin on
// it (the ratio estimator, which a feature that does not vary still
// determines), and with none to the mean. The features go in order of
// importance.
func fit(y []float64, xs ...[]float64) linear {
	in := make([]int, len(xs))
	for j := range in {
		in[j] = j
	}
	for len(in) > 0 {
		cols := make([][]float64, len(in))
		for q, j := range in {
			cols[q] = xs[j]
		}
		l, ok := solve(y, cols)
		if !ok {
			if len(in) == 1 {
				r := fitRatio(xs[in[0]], y)
				return spread(r, in, len(xs))
			}
			in = in[:len(in)-1]
			continue
		}
		worst, at := 0.0, -1
		for q, b := range l.B {
			if c := b * mean(cols[q]); c < worst {
				worst, at = c, q
			}
		}
		if at < 0 && l.A >= 0 {
			return spread(l, in, len(xs))
		}
		if at < 0 {
			// Only the intercept is negative: fewer features, and with
			// one left the line through the origin.
			if len(in) == 1 {
				return spread(fitRatio(xs[in[0]], y), in, len(xs))
			}
			in = in[:len(in)-1]
			continue
		}
		in = append(in[:at:at], in[at+1:]...)
	}
	return linear{A: max(mean(y), 0), B: make([]float64, len(xs))}
}

// spread is l, fitted on the features in (indices into n), with a term
// for every one of the n features: zero for those not in.
func spread(l linear, in []int, n int) linear {
	out := linear{A: l.A, B: make([]float64, n)}
	for q, j := range in {
		if q < len(l.B) {
			out.B[j] = l.B[q]
		}
	}
	return out
}

// fitRatio is the least-squares line through the origin, y = B*x, or the
// mean of y when every x is zero.
func fitRatio(x, y []float64) linear {
	var sxx, sxy float64
	for i := range x {
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	if sxx == 0 {
		return linear{A: max(mean(y), 0)}
	}
	return linear{B: []float64{max(sxy/sxx, 0)}}
}

func mean(y []float64) float64 {
	if len(y) == 0 {
		return 0
	}
	var s float64
	for _, v := range y {
		s += v
	}
	return s / float64(len(y))
}

// solve fits y = A + sum B[j]*xs[j] by the normal equations on centred
// columns; ok is false when they are singular. Terms may be negative.
func solve(y []float64, xs [][]float64) (linear, bool) {
	k, n := len(xs), len(y)
	if n < k+2 {
		return linear{}, false
	}
	mx := make([]float64, k)
	for j, x := range xs {
		mx[j] = mean(x)
	}
	my := mean(y)
	// a is the k x (k+1) augmented matrix [X'X | X'y] of centred columns.
	a := make([][]float64, k)
	for r := range k {
		a[r] = make([]float64, k+1)
		for c := range k {
			for i := range n {
				a[r][c] += (xs[r][i] - mx[r]) * (xs[c][i] - mx[c])
			}
		}
		for i := range n {
			a[r][k] += (xs[r][i] - mx[r]) * (y[i] - my)
		}
	}
	diag := make([]float64, k)
	for r := range k {
		diag[r] = a[r][r]
		if diag[r] <= 0 {
			return linear{}, false
		}
	}
	// Gaussian elimination; a pivot that lost all but a part in a
	// billion of its column's variance is collinearity.
	for c := range k {
		if a[c][c] <= 1e-9*diag[c] {
			return linear{}, false
		}
		for r := c + 1; r < k; r++ {
			f := a[r][c] / a[c][c]
			for cc := c; cc <= k; cc++ {
				a[r][cc] -= f * a[c][cc]
			}
		}
	}
	b := make([]float64, k)
	for r := k - 1; r >= 0; r-- {
		s := a[r][k]
		for c := r + 1; c < k; c++ {
			s -= a[r][c] * b[c]
		}
		b[r] = s / a[r][r]
	}
	l := linear{A: my, B: b}
	for j := range b {
		l.A -= b[j] * mx[j]
	}
	return l, true
}
