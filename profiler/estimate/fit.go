package estimate

// linear is y = A + B*x + C*z with A, B, C >= 0: a cost or a size as a
// function of one or two features of a sample.
type linear struct{ A, B, C float64 }

func (l linear) at(x, z float64) float64 { return l.A + l.B*x + l.C*z }

// fitRatio is the least-squares line through the origin, y = B*x: the
// ratio estimator sum(x*y)/sum(x*x), or the mean of y when every x is
// zero. It is what the fits fall back to when the calibration cannot tell
// a slope from an intercept (every x the same) or gives a negative term.
func fitRatio(xs, ys []float64) linear {
	var sxx, sxy, sy float64
	for i, x := range xs {
		sxx += x * x
		sxy += x * ys[i]
		sy += ys[i]
	}
	if sxx == 0 {
		if len(ys) == 0 {
			return linear{}
		}
		return linear{A: max(sy/float64(len(ys)), 0)}
	}
	return linear{B: max(sxy/sxx, 0)}
}

// fit1 is the least-squares line y = A + B*x with A, B >= 0, falling back
// to fitRatio where the free fit breaks either sign or x does not vary.
func fit1(xs, ys []float64) linear {
	n := float64(len(xs))
	if n < 2 {
		return fitRatio(xs, ys)
	}
	var mx, my float64
	for i, x := range xs {
		mx += x
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i, x := range xs {
		sxx += (x - mx) * (x - mx)
		sxy += (x - mx) * (ys[i] - my)
	}
	// x that varies by less than a part in a million of its mean is
	// constant: a slope would be noise.
	if sxx <= 1e-12*mx*mx*n || sxx == 0 {
		return fitRatio(xs, ys)
	}
	b := sxy / sxx
	a := my - b*mx
	if b < 0 {
		return linear{A: max(my, 0)}
	}
	if a < 0 {
		return fitRatio(xs, ys)
	}
	return linear{A: a, B: b}
}

// fit2 is the least-squares plane y = A + B*x + C*z with every term
// non-negative, falling back to fit1 on x where the calibration cannot
// determine the plane (fewer than four points, x and z collinear) or a
// term comes out negative.
func fit2(xs, zs, ys []float64) linear {
	if len(xs) < 4 {
		return fit1(xs, ys)
	}
	// Normal equations of [1 x z] in centred form.
	n := float64(len(xs))
	var mx, mz, my float64
	for i := range xs {
		mx += xs[i]
		mz += zs[i]
		my += ys[i]
	}
	mx, mz, my = mx/n, mz/n, my/n
	var sxx, szz, sxz, sxy, szy float64
	for i := range xs {
		dx, dz, dy := xs[i]-mx, zs[i]-mz, ys[i]-my
		sxx += dx * dx
		szz += dz * dz
		sxz += dx * dz
		sxy += dx * dy
		szy += dz * dy
	}
	det := sxx*szz - sxz*sxz
	if sxx == 0 || szz == 0 || det <= 1e-9*sxx*szz {
		return fit1(xs, ys)
	}
	b := (sxy*szz - szy*sxz) / det
	c := (szy*sxx - sxy*sxz) / det
	a := my - b*mx - c*mz
	if a < 0 || b < 0 || c < 0 {
		return fit1(xs, ys)
	}
	return linear{A: a, B: b, C: c}
}
