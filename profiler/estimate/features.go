package estimate

import (
	"fmt"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/profiler"
)

// opFeat is what one op does to one sample, known before it runs.
type opFeat struct {
	// out is the op's output size in bytes (ops.Value.Size), exact
	// unless size is set.
	out int64
	// size, for encode_jpeg, are the features its output's bytes are
	// fitted on (the JPEG's size is known only once it is encoded): its
	// pixels times the file's bytes per pixel, and its pixels.
	size []float64
	// inBytes says work[0] is the op's input bytes, known only once the
	// op before it is sized: a decode of encode_jpeg's output, whose cost
	// follows its pixels and the JPEG's bytes.
	inBytes bool
	// work are the features its cost is fitted on, most important first.
	work []float64
	// detail is the source JPEG's bytes per pixel of the output: the
	// file's bytes over the image area the output shows, spread over the
	// output's pixels. It is what the output's zstd ratio is fitted on.
	detail float64
}

// feats are a sample's features for every op of p and for its cut.
type feats struct {
	ops []opFeat
	// class is the decode's cost class (progressive, grey).
	class int
	// thisArea is the cut region's area for the sample's own key,
	// rounded out to whole iMCUs as the cut rounds it; meanArea the mean
	// over the crop's boxes (profiler.MeanCutArea).
	thisArea, meanArea float64
	// bpp is the file's bytes per image pixel.
	bpp float64
	// cutRows is the height of the cut's crop box for the sample's own
	// key (the resampler's vertical pass).
	cutRows float64
}

// sampleFeats walks p's ops over s's shapes, drawing each random op's
// choice from its seed as the op itself would (ops.SeedFor).
func sampleFeats(p *ops.Pipeline, s Sample, seed, epoch uint64) (feats, error) {
	if s.W < 1 || s.H < 1 {
		return feats{}, fmt.Errorf("%w: sample %d is %dx%d", ErrSample, s.ID, s.W, s.H)
	}
	f := feats{ops: make([]opFeat, p.Len()), class: class(s)}
	raw, area := float64(s.Raw), float64(s.W)*float64(s.H)
	f.bpp = raw / area
	// w, h: the current image's size; shown: the area of the source image
	// it shows; tensor: whether it is a float32 tensor; encoded: whether it
	// is encode_jpeg's output (a decode then decodes that, not the file).
	w, h, shown, tensor, encoded := 0, 0, area, false, false
	var r ops.Rand
	for j := range p.Len() {
		r.Seed(ops.SeedFor(seed, epoch, s.ID, j))
		var of opFeat
		switch o := p.Op(j).(type) {
		case ops.Decode:
			if encoded {
				// The encode kept the image's dimensions; its bytes are
				// filled in once they are fitted or recorded.
				of.work, of.inBytes = []float64{0, float64(w * h)}, true
				break
			}
			w, h = s.W, s.H
			of.work = []float64{area, raw}
		case ops.Encode:
			// The JPEG's bytes follow its pixels and how much detail they
			// carry, which the file's bytes per pixel tell better than the
			// file's bytes in the area they show (a crop's pixels are
			// resampled). The pixels come second: where every crop has the
			// same size, the fit cannot use them (fit drops the last).
			px := float64(w * h)
			of.size = []float64{px * f.bpp, px}
			of.work = []float64{px * f.bpp, px}
		case ops.RandomResizedCrop:
			box := ops.SampleRRCBox(w, h, o.Params, &r)
			shown = shown * float64(box.W*box.H) / float64(max(w*h, 1))
			// The resampler's horizontal pass reads the box's pixels, its
			// vertical pass a column per output pixel for each box row.
			of.work = []float64{float64(box.W * box.H), float64(box.H)}
			w, h = o.W, o.H
		case ops.DecodeRandomResizedCrop:
			box := ops.SampleRRCBox(s.W, s.H, o.Params, &r)
			shown = float64(box.W * box.H)
			of.work = []float64{float64(box.W * box.H), raw * shown / area}
			w, h = o.W, o.H
		case ops.Resize:
			in := float64(w * h)
			w, h = o.OutputSize(w, h)
			of.work = []float64{in, float64(w * h)}
		case ops.CenterCrop:
			cw, ch := min(o.W, w), min(o.H, h)
			shown = shown * float64(cw*ch) / float64(max(w*h, 1))
			w, h = o.W, o.H
			of.work = []float64{float64(w * h)}
		case ops.RandomHorizontalFlip:
			of.work = []float64{0}
			if r.Float64() < o.P {
				of.work[0] = float64(w * h)
			}
		case ops.ToTensor:
			tensor = true
			of.work = []float64{float64(w * h)}
		case ops.Normalize:
			of.work = []float64{float64(w * h)}
		default:
			return feats{}, fmt.Errorf("%w: op %s", ErrUnsupported, p.Op(j).Name())
		}
		of.out = int64(w) * int64(h) * ops.Channels
		if tensor {
			of.out *= 4
		}
		encoded = of.size != nil
		if encoded {
			of.out = 0
		}
		of.detail = raw * shown / area / float64(max(w*h, 1))
		f.ops[j] = of
	}
	if p.CanCut() {
		key := ops.Key{Seed: seed, Epoch: epoch, Sample: s.ID}
		this, err := p.CutRegion(s.W, s.H, key)
		if err != nil {
			return feats{}, err
		}
		f.thisArea = cutImage(s).Area(this)
		var r ops.Rand
		r.Seed(ops.SeedFor(seed, epoch, s.ID, 1))
		if c, ok := p.Op(1).(ops.RandomResizedCrop); ok {
			f.cutRows = float64(ops.SampleRRCBox(s.W, s.H, c.Params, &r).H)
		}
		if f.meanArea, err = profiler.MeanCutArea(p, cutImage(s)); err != nil {
			return feats{}, err
		}
	}
	return f, nil
}

// cutImage is s as the cut sees it (profiler.CutImage): its MCU size
// where known, else 16x16 (4:2:0, the usual) for colour and 8x8 for grey.
func cutImage(s Sample) profiler.CutImage {
	return profiler.CutImageOf(s.W, s.H, s.MCUW, s.MCUH, s.Components)
}
