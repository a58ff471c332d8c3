package ops

import (
	"errors"
	"time"
)

// Key identifies one application of a pipeline: the run's seed, the epoch
// and the sample. With the op index it seeds every random draw.
type Key struct {
	Seed, Epoch, Sample uint64
}

// Pipeline is an ordered list of ops that turns encoded bytes into the
// model's input. Build one with [Spec.Build], [Preset] or [LoadPipeline].
// A Pipeline is immutable and safe for concurrent use.
type Pipeline struct {
	spec Spec
	id   string
	ops  []Op
	// fused[j] runs ops j and j+1 as one step when both are in range and
	// nobody observes the ops one by one. A fused pair must give output and
	// errors identical to the two ops run one after the other; the tests
	// check each pair against the separate ops.
	fused map[int]fusedPair
}

// fusedPair runs two adjacent ops at once under lim. r is seeded for the
// second op, the only one of the known pairs that draws.
type fusedPair func(in Value, r *Rand, lim Limits) (Value, error)

func newPipeline(spec Spec, id string, ops []Op) *Pipeline {
	p := &Pipeline{spec: spec, id: id, ops: ops, fused: map[int]fusedPair{}}
	for j := 0; j+1 < len(ops); j++ {
		switch a := ops[j].(type) {
		case ToTensor:
			// One table lookup per byte, bit-identical to ToTensor then
			// Normalize.
			if n, ok := ops[j+1].(Normalize); ok {
				luts := n.lut()
				p.fused[j] = func(in Value, _ *Rand, _ Limits) (Value, error) {
					return toTensorLUT(in.(*Image), luts), nil
				}
			}
		case Decode:
			// Decode only the crop's pixels, still reading the whole file.
			if c, ok := ops[j+1].(RandomResizedCrop); ok {
				p.fused[j] = func(in Value, r *Rand, lim Limits) (Value, error) {
					return decodeCropResize(in.(Encoded), lim.decode(a.Limits), c, r)
				}
			}
		}
	}
	return p
}

// decodeCropResize is Decode followed by RandomResizedCrop, decoding (IDCT,
// upsampling, colour conversion) only the crop box. DecodeJPEGCrop's pixels
// equal the full decode's and it fails where the full decode fails, and the
// box is drawn from the header's dimensions, which the full decode's image
// has, so the result is identical.
func decodeCropResize(data Encoded, lim DecodeLimits, c RandomResizedCrop, r *Rand) (Value, error) {
	h, err := ReadJPEGHeader(data)
	if err != nil {
		return nil, err
	}
	if err := lim.Check(h); err != nil {
		return nil, err
	}
	box := SampleRRCBox(h.W, h.H, c.Params, r)
	img, got, err := DecodeJPEGCrop(data, box, lim)
	if err != nil {
		return nil, err
	}
	crop := Rect{X: box.X - got.X, Y: box.Y - got.Y, W: box.W, H: box.H}
	return Resample(img, crop, [4]float32{0, 0, float32(box.W), float32(box.H)}, c.W, c.H), nil
}

// Name is the spec's name, e.g. "imagenet-train".
func (p *Pipeline) Name() string { return p.spec.Name }

// ID names the pipeline and a hash of its canonical spec, so two nodes can
// check that they run the same ops with the same parameters.
func (p *Pipeline) ID() string { return p.id }

// Spec returns the canonical spec, every default filled in.
func (p *Pipeline) Spec() Spec { return p.spec.clone() }

// Len is the number of ops; split points run from 0 to Len.
func (p *Pipeline) Len() int { return len(p.ops) }

// Op returns op j.
func (p *Pipeline) Op(j int) Op { return p.ops[j] }

// KindAt is the representation a sample has at split k: before op k runs.
func (p *Pipeline) KindAt(k int) Kind {
	if k == SplitCut {
		return KindCut
	}
	if k == 0 {
		return KindEncoded
	}
	return p.ops[k-1].Out()
}

// Run applies ops[from:to] to in for the sample named by key. From
// [SplitCut], in is a *[CutJPEG] and ops[0:2] run on the cut (to must be at
// least 2). Errors are
// *SampleError values naming the sample and the op. It trusts its input and
// the spec; a server should use RunLimited.
func (p *Pipeline) Run(key Key, in Value, from, to int) (Value, error) {
	return p.run(key, in, from, to, nil, Limits{})
}

// RunLimited is Run under lim, for input and specs from clients that are
// not trusted (a storage agent serving requests):
//
//   - before any op runs, every op's output size, computed from the input's
//     dimensions (a JPEG's from its header) and the ops' parameters, against
//     MaxOutputBytes, and the last op's against MaxResultBytes (ErrTooLarge),
//     so nothing too large is ever allocated;
//   - before each op, the deadline (ErrDeadline);
//   - decode ops run under the smaller of their own max_pixels and
//     lim.MaxPixels, and under MaxScans, MaxMemory and the deadline inside
//     the decoder (ErrTooLarge, ErrDeadline).
//
// Limits only refuse: a run that passes gives exactly Run's bytes, and,
// MaxResultBytes aside, a split run refuses what the whole run refuses. Errors are *SampleError
// values naming the sample and the op, e.g.
//
//	sample 7: op resize: ops: image too large: resize output
//	32768x32768x3 = 3 GiB above the 128 MiB limit
//
// A server typically calls
//
//	lim := ops.DefaultLimits()
//	lim.Deadline = time.Now().Add(timeout)
//	v, err := p.RunLimited(key, ops.Encoded(raw), 0, split, lim)
func (p *Pipeline) RunLimited(key Key, in Value, from, to int, lim Limits) (Value, error) {
	return p.run(key, in, from, to, nil, lim)
}

// Observer receives each op's output and the time it took.
type Observer func(j int, out Value, d time.Duration)

// RunObserved is Run that reports every op's output and duration to obs.
// Ops run one by one (no fusion), so each op's cost is its own.
func (p *Pipeline) RunObserved(key Key, in Value, from, to int, obs Observer) (Value, error) {
	return p.run(key, in, from, to, obs, Limits{})
}

// RunObservedLimited is RunObserved under lim (see [Pipeline.RunLimited]).
func (p *Pipeline) RunObservedLimited(key Key, in Value, from, to int, obs Observer, lim Limits) (Value, error) {
	return p.run(key, in, from, to, obs, lim)
}

func (p *Pipeline) run(key Key, in Value, from, to int, obs Observer, lim Limits) (Value, error) {
	if from == SplitCut {
		// ops[0:2] from the cut file, then the rest from split 2.
		if to < 2 || to > len(p.ops) {
			return nil, &SampleError{Sample: key.Sample, Err: wrapf(ErrSplit, "ops [cut:%d] of %d", to, len(p.ops))}
		}
		var start time.Time
		if obs != nil {
			start = time.Now()
		}
		v, err := p.finishCut(key, in, lim)
		if err != nil {
			return nil, &SampleError{Sample: key.Sample, Op: "cut", Err: err}
		}
		if obs != nil {
			obs(1, v, time.Since(start))
		}
		in, from = v, 2
	}
	if from < 0 || to > len(p.ops) || from > to {
		return nil, &SampleError{Sample: key.Sample, Err: wrapf(ErrSplit, "ops [%d:%d] of %d", from, to, len(p.ops))}
	}
	if in == nil || in.Kind() != p.KindAt(from) {
		op := ""
		if from < len(p.ops) {
			op = p.ops[from].Name()
		}
		got := "nil"
		if in != nil {
			got = in.Kind().String()
		}
		return nil, &SampleError{Sample: key.Sample, Op: op, Err: wrapf(ErrKind, "split %d takes %s, got %s", from, p.KindAt(from), got)}
	}
	var r Rand
	v := in
	limited := lim != Limits{}
	if lim.MaxOutputBytes > 0 || lim.MaxResultBytes > 0 {
		// Every op's output size follows from the input's dimensions (the
		// JPEG header's for a decode) and the ops' parameters, so check the
		// whole run before anything is allocated. The ops run one by one,
		// fused or from a split, refuse exactly the same.
		s := shapeOf(in)
		for j := from; j < to; j++ {
			op := limitOp(p.ops[j], lim)
			var err error
			if s, err = checkedShape(op, s, lim); err == nil && j == to-1 {
				err = checkOutput(op.Name(), s, lim.MaxResultBytes)
			}
			if err != nil {
				return nil, &SampleError{Sample: key.Sample, Op: op.Name(), Err: err}
			}
		}
	}
	for j := from; j < to; j++ {
		op := p.ops[j]
		if !lim.Deadline.IsZero() {
			if err := checkDeadline(lim.Deadline, "before op "+op.Name()); err != nil {
				return nil, &SampleError{Sample: key.Sample, Op: op.Name(), Err: err}
			}
		}
		if f, ok := p.fused[j]; ok && obs == nil && j+1 < to {
			// Errors of a fused pair are the first op's: the second cannot
			// fail on what the first produces.
			r.Seed(SeedFor(key.Seed, key.Epoch, key.Sample, j+1))
			out, err := f(v, &r, lim)
			if err != nil {
				return nil, &SampleError{Sample: key.Sample, Op: op.Name(), Err: err}
			}
			v = out
			j++
			continue
		}
		if limited {
			op = limitOp(op, lim)
		}
		r.Seed(SeedFor(key.Seed, key.Epoch, key.Sample, j))
		var start time.Time
		if obs != nil {
			start = time.Now()
		}
		out, err := op.Apply(v, &r)
		if err != nil {
			var se *SampleError
			if errors.As(err, &se) {
				return nil, err
			}
			return nil, &SampleError{Sample: key.Sample, Op: op.Name(), Err: err}
		}
		if obs != nil {
			obs(j, out, time.Since(start))
		}
		v = out
	}
	return v, nil
}

// checkedShape returns the shape of op's output for an input of shape in and
// refuses it when above lim.MaxOutputBytes.
func checkedShape(op Op, in shape, lim Limits) (shape, error) {
	sh, ok := op.(shaper)
	if !ok {
		return shape{}, wrapf(ErrSpec, "op %s cannot tell its output size", op.Name())
	}
	out, err := sh.outShape(in)
	if err != nil {
		return shape{}, err
	}
	return out, checkOutput(op.Name(), out, lim.MaxOutputBytes)
}

// CropSplit is the split just after the pipeline's first crop op
// (random_resized_crop, decode_random_resized_crop or center_crop): the
// ResizeOff baseline's split. ok is false when the pipeline has none.
// Profiles record it (profiler.Profile.CropSplit), so the planners never
// guess it from op names.
func (p *Pipeline) CropSplit() (k int, ok bool) {
	names := make([]string, p.Len())
	for j := range names {
		names[j] = p.Op(j).Name()
	}
	return CropSplitOf(names)
}

// cropOps are the ops a crop split follows.
var cropOps = []Op{RandomResizedCrop{}, DecodeRandomResizedCrop{}, CenterCrop{}}

// CropSplitOf is CropSplit of a pipeline whose ops have these names (as
// Op.Name gives them, and a profile lists them): the split just after the
// first crop op; ok is false when there is none. A planner reads the crop
// split of a profile that predates profiler.Profile.CropSplit this way.
func CropSplitOf(names []string) (k int, ok bool) {
	for j, name := range names {
		for _, op := range cropOps {
			if name == op.Name() {
				return j + 1, true
			}
		}
	}
	return 0, false
}

// CacheSplit is the split at which a compute-side cache keeps a sample: the
// finished output (Len) when no op draws from its Rand, so the value depends
// on neither seed nor epoch (imagenet-val), else the encoded file (0), the
// smallest seed-independent form of a random pipeline's sample.
func (p *Pipeline) CacheSplit() int {
	for _, op := range p.ops {
		switch op.(type) {
		case RandomResizedCrop, DecodeRandomResizedCrop, RandomHorizontalFlip:
			return 0
		}
	}
	return len(p.ops)
}
