package profiler

import "slices"

// Regression to the mean. A profile records each sample once, in one
// epoch, and two of its sizes vary from epoch to epoch with what the
// random crop keeps: the JPEG cut's bytes per pixel of its region, and the
// compressed size of the crop's output (and of every later split's). A
// planner that picks samples by those sizes picks those whose one
// recorded region happened to be cheap, and in the epoch that runs they
// are average, so even a plan scaled to each epoch's boxes (AtEpoch)
// sends more bytes than it planned. Expect replaces each such size by a
// better estimate of its expectation over epochs: the cut's bytes by the
// population's bytes per pixel of the file over the region's mean area
// (the file's own compression kept, the region's detail dropped), and the
// compressed sizes after the crop half way to a regression on the file's
// bytes per decoded byte (how detailed the image is). docs/policy.md,
// "Each epoch's own boxes", has the planned against the actual bytes with
// and without it.

// ownCompressed is the weight of a sample's own recorded compressed size
// after the crop against the regression's.
const ownCompressed = 0.5

// Expect is p with its epoch-varying sizes replaced by their expected
// values (see above); p is not changed. The cut needs the samples'
// images (c.Image); without them only the compressed sizes move.
func (c *CutAreas) Expect(p *Profile) *Profile {
	if p == nil {
		return nil
	}
	out := *p
	out.Samples = slices.Clone(p.Samples)
	for i := range out.Samples {
		out.Samples[i].Compressed = slices.Clone(out.Samples[i].Compressed)
	}
	c.expectCuts(out.Samples)
	expectCompressed(out.Samples, p.CropSplit)
	return &out
}

// expectCuts sets each cut's bytes to the population's bytes per file
// byte shown (sum of cuts over the sum of the files' bytes in their mean
// regions) times its own file's bytes in its mean region.
func (c *CutAreas) expectCuts(ss []SampleProfile) {
	if c == nil || c.Pipe == nil || c.Image == nil || !c.Pipe.CanCut() {
		return
	}
	shown := make([]float64, len(ss))
	var cuts, total float64
	for i, s := range ss {
		im, ok := c.Image(s.ID)
		if !s.HasCut() || !ok || im.W < 1 || im.H < 1 {
			continue
		}
		m, err := MeanCutArea(c.Pipe, im)
		if err != nil || !(m > 0) {
			continue
		}
		shown[i] = float64(s.Raw) * m / (float64(im.W) * float64(im.H))
		cuts += float64(s.CutBytes)
		total += shown[i]
	}
	if !(total > 0) {
		return
	}
	for i := range ss {
		if shown[i] > 0 {
			ss[i].CutBytes = max(1, min(int64(shown[i]*cuts/total+0.5), ss[i].Raw))
		}
	}
}

// expectCompressed moves each compressed size at the splits from crop on
// half way to the least-squares line of compressed over plain bytes
// against the file's bytes per decoded byte (Raw / Bytes[1]).
func expectCompressed(ss []SampleProfile, crop int) {
	if crop < 1 || len(ss) < 3 {
		return
	}
	for k := crop; ; k++ {
		var xs, ys []float64
		for _, s := range ss {
			if k < len(s.Compressed) && len(s.Bytes) > 1 && s.Bytes[1] > 0 && s.Bytes[k] > 0 {
				xs = append(xs, float64(s.Raw)/float64(s.Bytes[1]))
				ys = append(ys, float64(s.Compressed[k])/float64(s.Bytes[k]))
			}
		}
		if len(xs) == 0 {
			return
		}
		if len(xs) < 3 {
			continue
		}
		a, b := line(xs, ys)
		for i := range ss {
			s := &ss[i]
			if k >= len(s.Compressed) || len(s.Bytes) < 2 || s.Bytes[1] <= 0 || s.Bytes[k] <= 0 {
				continue
			}
			pred := min(1, max(0, a+b*float64(s.Raw)/float64(s.Bytes[1]))) * float64(s.Bytes[k])
			s.Compressed[k] = min(s.Bytes[k], max(1, int64(ownCompressed*float64(s.Compressed[k])+(1-ownCompressed)*pred+0.5)))
		}
	}
}

// line is the least-squares line y = a + b x.
func line(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	var mx, my float64
	for i := range xs {
		mx += xs[i] / n
		my += ys[i] / n
	}
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return my, 0
	}
	b = sxy / sxx
	return my - b*mx, b
}

// ScaleVarying is p with its epoch-varying sizes (the cuts' bytes, the
// compressed sizes from the crop split on) times f, each capped at what it
// cannot exceed (the file, the plain bytes); p is not changed, and f = 1
// returns it. A planner calibrates f on what its plans' samples sent
// against what it predicted for them.
func (p *Profile) ScaleVarying(f float64) *Profile {
	if p == nil || f == 1 || !(f > 0) {
		return p
	}
	out := *p
	out.Samples = slices.Clone(p.Samples)
	for i := range out.Samples {
		s := &out.Samples[i]
		if s.HasCut() {
			s.CutBytes = max(1, min(scale(s.CutBytes, f), s.Raw))
		}
		if p.CropSplit < 1 || p.CropSplit >= len(s.Compressed) {
			continue
		}
		s.Compressed = slices.Clone(s.Compressed)
		for k := p.CropSplit; k < len(s.Compressed) && k < len(s.Bytes); k++ {
			s.Compressed[k] = max(1, min(scale(s.Compressed[k], f), s.Bytes[k]))
		}
	}
	return &out
}
