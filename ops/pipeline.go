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
	// fused[j] is set when ops[j] is ToTensor and ops[j+1] is Normalize: the
	// pair then runs as one table lookup per byte, bit-identical to the two
	// ops one after the other.
	fused map[int][Channels]*[256]float32
}

func newPipeline(spec Spec, id string, ops []Op) *Pipeline {
	p := &Pipeline{spec: spec, id: id, ops: ops, fused: map[int][Channels]*[256]float32{}}
	for j := 0; j+1 < len(ops); j++ {
		_, isT := ops[j].(ToTensor)
		n, isN := ops[j+1].(Normalize)
		if isT && isN {
			p.fused[j] = n.lut()
		}
	}
	return p
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
	if k == 0 {
		return KindEncoded
	}
	return p.ops[k-1].Out()
}

// Run applies ops[from:to] to in for the sample named by key. Errors are
// *SampleError values naming the sample and the op.
func (p *Pipeline) Run(key Key, in Value, from, to int) (Value, error) {
	return p.run(key, in, from, to, nil)
}

// Observer receives each op's output and the time it took.
type Observer func(j int, out Value, d time.Duration)

// RunObserved is Run that reports every op's output and duration to obs.
// Ops run one by one (no fusion), so each op's cost is its own.
func (p *Pipeline) RunObserved(key Key, in Value, from, to int, obs Observer) (Value, error) {
	return p.run(key, in, from, to, obs)
}

func (p *Pipeline) run(key Key, in Value, from, to int, obs Observer) (Value, error) {
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
	for j := from; j < to; j++ {
		if luts, ok := p.fused[j]; ok && obs == nil && j+1 < to {
			v = toTensorLUT(v.(*Image), luts)
			j++
			continue
		}
		op := p.ops[j]
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
