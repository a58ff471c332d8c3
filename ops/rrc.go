package ops

import "math"

// RRCParams are RandomResizedCrop's sampling parameters, with torchvision's
// meaning: Scale bounds the crop's area as a fraction of the image's, Ratio
// bounds its aspect ratio (w/h), sampled uniformly in log space.
type RRCParams struct {
	Scale [2]float64
	Ratio [2]float64
}

// DefaultRRCParams are torchvision's defaults: scale (0.08, 1), ratio
// (3/4, 4/3).
var DefaultRRCParams = RRCParams{Scale: [2]float64{0.08, 1}, Ratio: [2]float64{3.0 / 4, 4.0 / 3}}

// rrcAttempts is how many boxes torchvision tries before its fallback.
const rrcAttempts = 10

// SampleRRCBox draws a crop box for a w x h image exactly as torchvision's
// RandomResizedCrop.get_params does: up to ten attempts at a box with area
// fraction U(scale) and log-uniform aspect ratio that fits the image, with a
// uniformly placed origin; failing that, the largest centred box whose aspect
// ratio is clamped into Ratio. Python's round (half to even) is reproduced.
func SampleRRCBox(w, h int, p RRCParams, r *Rand) Rect {
	area := float64(w) * float64(h)
	logLo, logHi := math.Log(p.Ratio[0]), math.Log(p.Ratio[1])
	for range rrcAttempts {
		target := area * r.Uniform(p.Scale[0], p.Scale[1])
		aspect := math.Exp(r.Uniform(logLo, logHi))
		cw := int(math.RoundToEven(math.Sqrt(target * aspect)))
		ch := int(math.RoundToEven(math.Sqrt(target / aspect)))
		if cw > 0 && cw <= w && ch > 0 && ch <= h {
			y := r.Intn(h - ch + 1)
			x := r.Intn(w - cw + 1)
			return Rect{X: x, Y: y, W: cw, H: ch}
		}
	}
	// Fallback to a central crop.
	inRatio := float64(w) / float64(h)
	cw, ch := w, h
	switch {
	case inRatio < p.Ratio[0]:
		ch = int(math.RoundToEven(float64(cw) / p.Ratio[0]))
	case inRatio > p.Ratio[1]:
		cw = int(math.RoundToEven(float64(ch) * p.Ratio[1]))
	}
	return Rect{X: (w - cw) / 2, Y: (h - ch) / 2, W: cw, H: ch}
}
