package profiler

import (
	"cmp"
	"slices"
	"sync"

	"github.com/sophon-dl/sophon/ops"
)

// Cuts of one epoch. A profile's cut fields (CutBytes, CutFinishNS) are
// for the mean area of the regions the cut keeps (MeanCutArea), not for
// any one epoch's box: a plan made from them has the right sums but not
// each epoch's, and a planner that picks the samples to cut by size gets
// more bytes than it planned in every epoch (the samples it picked have
// average boxes in the epoch that runs, not small ones). Each epoch's box
// is a pure function of (seed, epoch, sample, width, height), so
// CutAreas.AtEpoch scales the cut of every sample whose dimensions are
// known to the box it has in that epoch, and a plan for that epoch is
// exact in its cut bytes.

// CutDraws is how many boxes MeanCutArea averages over: the area's
// coefficient of variation under random_resized_crop's default scale is
// about 0.5, so the mean is within about 2% of the expectation.
const CutDraws = 512

// refEpoch is the first of the CutDraws epochs whose boxes MeanCutArea
// draws (with seed 0 and sample 0): epochs no run reaches.
const refEpoch = 1 << 62

// MeanCutArea is the expected area of the region p's cut keeps of image im
// (rounded to its iMCUs, CutImage.Area) over the random crop's boxes: the
// mean over CutDraws fixed draws, the same for every sample, seed and
// epoch, so it depends on the image's shape alone (and is kept for the
// next call with the same pipeline and shape, up to meanMemoMax shapes).
func MeanCutArea(p *ops.Pipeline, im CutImage) (float64, error) {
	k := memoKey{p.ID(), im}
	meanMemo.Lock()
	m, ok := meanMemo.m[k]
	meanMemo.Unlock()
	if ok {
		return m, nil
	}
	var sum float64
	for j := range uint64(CutDraws) {
		r, err := p.CutRegion(im.W, im.H, ops.Key{Epoch: refEpoch + j})
		if err != nil {
			return 0, err
		}
		sum += im.Area(r)
	}
	m = sum / CutDraws
	meanMemo.Lock()
	if meanMemo.m == nil || len(meanMemo.m) >= meanMemoMax {
		meanMemo.m = map[memoKey]float64{}
	}
	meanMemo.m[k] = m
	meanMemo.Unlock()
	return m, nil
}

// meanMemo keeps MeanCutArea by pipeline and image shape; it starts again
// empty past meanMemoMax shapes.
var meanMemo struct {
	sync.Mutex
	m map[memoKey]float64
}

const meanMemoMax = 1 << 16

type memoKey struct {
	pipe string
	im   CutImage
}

// CutImage is what a cut region's size depends on: the image's
// dimensions and its iMCU (the cut keeps whole iMCUs).
type CutImage struct {
	W, H int
	// MCUW and MCUH are the iMCU's size in pixels; 0 takes 16x16, the
	// usual colour JPEG's (4:2:0).
	MCUW, MCUH int
}

// CutImageOf is the CutImage of a JPEG header summary: its dimensions and
// iMCU, 8x8 for a grey image whose iMCU is unknown.
func CutImageOf(w, h, mcuW, mcuH, components int) CutImage {
	if (mcuW <= 0 || mcuH <= 0) && components == 1 {
		mcuW, mcuH = 8, 8
	}
	return CutImage{W: w, H: h, MCUW: mcuW, MCUH: mcuH}
}

// Area is r's area rounded out to whole iMCUs, clamped to the image, as
// the cut rounds it.
func (im CutImage) Area(r ops.Rect) float64 {
	mw, mh := im.MCUW, im.MCUH
	if mw <= 0 || mh <= 0 {
		mw, mh = 16, 16
	}
	x0, y0 := r.X/mw*mw, r.Y/mh*mh
	x1 := min(im.W, (r.X+r.W+mw-1)/mw*mw)
	y1 := min(im.H, (r.Y+r.H+mh-1)/mh*mh)
	return float64(max(x1-x0, 0)) * float64(max(y1-y0, 0))
}

// cutFactor is the area of the region the cut keeps of im for key over its
// mean (MeanCutArea), both rounded to im's iMCUs; ok false when either is
// unknown.
func cutFactor(p *ops.Pipeline, im CutImage, key ops.Key, mean float64) (f float64, ok bool) {
	r, err := p.CutRegion(im.W, im.H, key)
	if err != nil || !(mean > 0) {
		return 1, false
	}
	a := im.Area(r)
	return a / mean, a > 0
}

// CutAreas scales a profile's cuts to an epoch's boxes (see the top of
// this file).
type CutAreas struct {
	Pipe *ops.Pipeline
	Seed uint64
	// Image gives a sample's image; ok false leaves its cut as it is (the
	// mean).
	Image func(id uint64) (CutImage, bool)
	mu    sync.Mutex
	mean  map[uint64]float64 // MeanCutArea by sample, filled as needed
}

// Factor is sample id's cut area in epoch over its mean area, 1 where
// its dimensions are unknown or the pipeline has no cut.
func (c *CutAreas) Factor(id, epoch uint64) float64 {
	if c == nil || c.Pipe == nil || c.Image == nil || !c.Pipe.CanCut() {
		return 1
	}
	im, ok := c.Image(id)
	if !ok {
		return 1
	}
	m, err := MeanCutArea(c.Pipe, im)
	if err != nil {
		return 1
	}
	f, _ := cutFactor(c.Pipe, im, ops.Key{Seed: c.Seed, Epoch: epoch, Sample: id}, m)
	return f
}

// Shown is the share of sample id's image that its cut keeps in epoch
// (the region's area, rounded to iMCUs, over the image's); ok false where
// the image is unknown or the pipeline has no cut.
func (c *CutAreas) Shown(id, epoch uint64) (share float64, ok bool) {
	if c == nil || c.Pipe == nil || c.Image == nil || !c.Pipe.CanCut() {
		return 0, false
	}
	im, ok := c.Image(id)
	if !ok || im.W < 1 || im.H < 1 {
		return 0, false
	}
	r, err := c.Pipe.CutRegion(im.W, im.H, ops.Key{Seed: c.Seed, Epoch: epoch, Sample: id})
	if err != nil {
		return 0, false
	}
	return im.Area(r) / (float64(im.W) * float64(im.H)), true
}

// AtEpoch is p with every cut scaled to its box in epoch: CutBytes (at
// most the file: a larger cut is declined and the file sent) and
// CutFinishNS by the area's Factor; p is not changed. With nothing to
// scale it returns p.
func (c *CutAreas) AtEpoch(p *Profile, epoch uint64) *Profile {
	if p == nil || c == nil || c.Pipe == nil || !c.Pipe.CanCut() {
		return p
	}
	out := *p
	out.Samples = slices.Clone(p.Samples)
	for i := range out.Samples {
		s := &out.Samples[i]
		if !s.HasCut() {
			continue
		}
		f := c.Factor(s.ID, epoch)
		s.CutBytes = max(1, min(scale(s.CutBytes, f), s.Raw))
		s.CutFinishNS = scale(s.CutFinishNS, f)
	}
	return &out
}

// Normalize turns observations made in epoch into the mean area's terms
// that a profile keeps (the inverse of AtEpoch for the cut's payload and
// the share of its compute side that est, the profile they refine, puts on
// the cut's finish); other observations are returned as they are.
func (c *CutAreas) Normalize(obs []Observation, est *Profile, epoch uint64) []Observation {
	if c == nil || c.Pipe == nil || !c.Pipe.CanCut() || est == nil {
		return obs
	}
	out := slices.Clone(obs)
	for i := range out {
		o := &out[i]
		if o.Split != ops.SplitCut {
			continue
		}
		f := c.Factor(o.ID, epoch)
		if !(f > 0) || f == 1 {
			continue
		}
		o.Payload = max(1, scale(o.Payload, 1/f))
		j, ok := slices.BinarySearchFunc(est.Samples, o.ID, func(s SampleProfile, id uint64) int { return cmp.Compare(s.ID, id) })
		if !ok || o.LocalNS <= 0 {
			continue
		}
		s := &est.Samples[j]
		rest := float64(sum(s.OpNS[min(2, len(s.OpNS)):]))
		if fin := float64(s.CutFinishNS); fin+rest > 0 {
			share := fin / (fin + rest)
			o.LocalNS = scale(o.LocalNS, share/f+(1-share))
		}
	}
	return out
}
