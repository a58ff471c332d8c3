package estimate

import (
	"fmt"

	"github.com/sophon-dl/sophon/ops"
)

// opFeat is what one op does to one sample, known before it runs.
type opFeat struct {
	// out is the op's output size in bytes (ops.Value.Size), exact.
	out int64
	// work and work2 are the features its cost is fitted on.
	work, work2 float64
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
	// thisArea is the cut region's area for the sample's own key;
	// meanArea the mean over the cutDraws epochs after it.
	thisArea, meanArea float64
}

// cutDraws is how many later epochs' boxes a cut is averaged over; it is
// profiler's (the recorder scales a recorded cut the same way).
const cutDraws = 16

// sampleFeats walks p's ops over s's shapes, drawing each random op's
// choice from its seed as the op itself would (ops.SeedFor).
func sampleFeats(p *ops.Pipeline, s Sample, seed, epoch uint64) (feats, error) {
	if s.W < 1 || s.H < 1 {
		return feats{}, fmt.Errorf("%w: sample %d is %dx%d", ErrSample, s.ID, s.W, s.H)
	}
	f := feats{ops: make([]opFeat, p.Len()), class: class(s)}
	raw, area := float64(s.Raw), float64(s.W)*float64(s.H)
	// w, h: the current image's size; shown: the area of the source image
	// it shows; tensor: whether it is a float32 tensor.
	w, h, shown, tensor := 0, 0, area, false
	var r ops.Rand
	for j := range p.Len() {
		r.Seed(ops.SeedFor(seed, epoch, s.ID, j))
		var of opFeat
		switch o := p.Op(j).(type) {
		case ops.Decode:
			w, h = s.W, s.H
			of.work, of.work2 = area, raw
		case ops.RandomResizedCrop:
			box := ops.SampleRRCBox(w, h, o.Params, &r)
			shown = shown * float64(box.W*box.H) / float64(max(w*h, 1))
			of.work, of.work2 = float64(box.W*box.H), float64(o.W*o.H)
			w, h = o.W, o.H
		case ops.DecodeRandomResizedCrop:
			box := ops.SampleRRCBox(s.W, s.H, o.Params, &r)
			shown = float64(box.W * box.H)
			of.work, of.work2 = float64(box.W*box.H), raw*shown/area
			w, h = o.W, o.H
		case ops.Resize:
			of.work = float64(w * h)
			w, h = o.OutputSize(w, h)
			of.work2 = float64(w * h)
		case ops.CenterCrop:
			cw, ch := min(o.W, w), min(o.H, h)
			shown = shown * float64(cw*ch) / float64(max(w*h, 1))
			w, h = o.W, o.H
			of.work = float64(w * h)
		case ops.RandomHorizontalFlip:
			if r.Float64() < o.P {
				of.work = float64(w * h)
			}
		case ops.ToTensor:
			tensor = true
			of.work = float64(w * h)
		case ops.Normalize:
			of.work = float64(w * h)
		default:
			return feats{}, fmt.Errorf("%w: op %s", ErrUnsupported, p.Op(j).Name())
		}
		of.out = int64(w) * int64(h) * ops.Channels
		if tensor {
			of.out *= 4
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
		f.thisArea = float64(this.W * this.H)
		for d := range uint64(cutDraws) {
			k := key
			k.Epoch += 1 + d
			r, err := p.CutRegion(s.W, s.H, k)
			if err != nil {
				return feats{}, err
			}
			f.meanArea += float64(r.W*r.H) / cutDraws
		}
	}
	return f, nil
}
