package experiment

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/batch"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/testbed/results"
)

// encodeOp is the op that makes a pipeline lossy: a JPEG round trip.
const encodeOp = "encode_jpeg"

// ErrFidelity: the fidelity comparison could not be made.
var ErrFidelity = errors.New("experiment: fidelity")

// lossyAt is the index of p's first encode_jpeg op, or -1 for a lossless
// pipeline.
func lossyAt(p *ops.Pipeline) int {
	return slices.IndexFunc(p.Spec().Ops, func(o ops.OpSpec) bool { return o.Op == encodeOp })
}

// fidelitySource is where a lossy pipeline's fidelity is computed from:
// the samples file of its first exactly-once run, and that run's name.
type fidelitySource struct{ samples, run string }

// fidelity is Results.Fidelity: each lossy pipeline of Config.Pipelines
// (with encode_jpeg) against the first lossless one, over the samples
// its first exactly-once 1 x 1 run delivered (x.fidelityFrom). Nil when
// there is no such pair.
func (x *experiment) fidelity(ctx context.Context) []results.Fidelity {
	var lossless *ops.Pipeline
	var lossy []*ops.Pipeline
	for _, name := range x.cfg.Pipelines {
		p, err := ops.LoadPipeline(name)
		if err != nil {
			continue // the agents said why
		}
		switch {
		case lossyAt(p) >= 0:
			lossy = append(lossy, p)
		case lossless == nil:
			lossless = p
		}
	}
	if lossless == nil || len(lossy) == 0 {
		return nil
	}
	var out []results.Fidelity
	for _, p := range lossy {
		f := results.Fidelity{Pipeline: p.Name(), Reference: lossless.Name()}
		src, ok := x.fidelityFrom[p.Name()]
		if !ok {
			f.Error = "no exactly-once 1 x 1 run of it delivered samples to compare"
			out = append(out, f)
			continue
		}
		began := time.Now()
		l, err := readSamples(src.samples)
		if err == nil {
			f, err = compareFidelity(ctx, x.res.Dataset.Path, x.cfg.Seed, p, lossless, l.got)
		}
		f.Run, f.Seconds = src.run, time.Since(began).Seconds()
		if err != nil {
			f.Error = err.Error()
		}
		x.cfg.Log.Info().Str("pipeline", p.Name()).Float64("psnr_mean_db", f.PSNRMeanDB).Float64("max_abs_error", f.MaxAbsError).
			Int("samples", f.Samples).Int("verified", f.Verified).Float64("seconds", f.Seconds).Msg("fidelity")
		out = append(out, f)
	}
	return out
}

// compareFidelity recomputes, for every delivered (epoch, sample) of got
// (its tensor's sha256, hex, as the compute agent's --samples-out has
// it), lossy's tensor from the dataset in data with package ops, counts
// those that hash to the delivered one (batch.RowSHA, the agent's hash),
// and compares each with lossless's tensor for the same key: PSNR on the
// 0-255 scale of the decoded crop (the tensors' differences times the
// lossless pipeline's Normalize std times 255) and the largest absolute
// difference. Where both pipelines share their ops before lossy's
// encode_jpeg (decode, random_resized_crop, random_horizontal_flip: the
// same ops at the same indices draw the same crop and flip, ops.SeedFor)
// the crop is made once.
func compareFidelity(ctx context.Context, data string, seed uint64, lossy, lossless *ops.Pipeline, got map[[2]uint64]string) (results.Fidelity, error) {
	f := results.Fidelity{Pipeline: lossy.Name(), Reference: lossless.Name()}
	k := lossyAt(lossy)
	if k < 0 || lossyAt(lossless) >= 0 {
		return f, fmt.Errorf("%w: %s is not lossy or %s not lossless", ErrFidelity, lossy.Name(), lossless.Name())
	}
	levels, err := levelsPerUnit(lossless)
	if err != nil {
		return f, err
	}
	shared := k <= lossless.Len() && reflect.DeepEqual(lossy.Spec().Ops[:k], lossless.Spec().Ops[:k])
	d, err := dataset.Open(data)
	if err != nil {
		return f, fmt.Errorf("%w: dataset: %w", ErrFidelity, err)
	}
	defer d.Close()
	keys := make([][2]uint64, 0, len(got))
	for key := range got {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b [2]uint64) int {
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		return int(a[1]) - int(b[1])
	})
	one := func(key [2]uint64) (sample, error) {
		if key[1] >= d.Len() {
			return sample{}, fmt.Errorf("%w: sample %d of %d", ErrFidelity, key[1], d.Len())
		}
		raw, err := d.Read(key[1])
		if err != nil {
			return sample{}, err
		}
		opsKey := ops.Key{Seed: seed, Epoch: key[0], Sample: key[1]}
		var a, b ops.Value
		if shared {
			crop, err := lossy.Run(opsKey, ops.Encoded(raw), 0, k)
			if err != nil {
				return sample{}, err
			}
			again := crop
			if im, ok := crop.(*ops.Image); ok { // each run gets its own copy
				again = &ops.Image{W: im.W, H: im.H, Pix: slices.Clone(im.Pix)}
			}
			if a, err = lossy.Run(opsKey, crop, k, lossy.Len()); err != nil {
				return sample{}, err
			}
			if b, err = lossless.Run(opsKey, again, k, lossless.Len()); err != nil {
				return sample{}, err
			}
		} else {
			if a, err = lossy.Run(opsKey, ops.Encoded(raw), 0, lossy.Len()); err != nil {
				return sample{}, err
			}
			if b, err = lossless.Run(opsKey, ops.Encoded(raw), 0, lossless.Len()); err != nil {
				return sample{}, err
			}
		}
		ta, ok1 := a.(*ops.Tensor)
		tb, ok2 := b.(*ops.Tensor)
		if !ok1 || !ok2 || ta.C != tb.C || ta.H != tb.H || ta.W != tb.W {
			return sample{}, fmt.Errorf("%w: sample %d: the pipelines' outputs are not tensors of one shape", ErrFidelity, key[1])
		}
		sha := batch.RowSHA(ta)
		return diff(ta, tb, levels, hex.EncodeToString(sha[:]) == got[key]), nil
	}
	per, err := parallel(ctx, keys, one)
	if err != nil {
		return f, err
	}
	return summarise(f, per), nil
}

// sample is one compared tensor pair: the squared differences' sum on
// the 0-255 scale over n values, the largest absolute difference in the
// tensors' units and on the 0-255 scale, and whether the lossy tensor hashed to the delivered.
type sample struct {
	sq                  float64
	n                   int
	maxAbs, maxAbsLevel float64
	verified            bool
}

// diff compares a (lossy) with b (lossless); levels[c] is channel c's
// 0-255 levels per tensor unit.
func diff(a, b *ops.Tensor, levels [ops.Channels]float64, verified bool) sample {
	s := sample{n: len(a.Data), verified: verified}
	plane := a.H * a.W
	for i, v := range a.Data {
		dv := float64(v) - float64(b.Data[i])
		s.maxAbs = max(s.maxAbs, math.Abs(dv))
		c := min(i/max(plane, 1), ops.Channels-1)
		dl := dv * levels[c]
		s.maxAbsLevel = max(s.maxAbsLevel, math.Abs(dl))
		s.sq += dl * dl
	}
	return s
}

// summarise fills f from the compared samples.
func summarise(f results.Fidelity, per []sample) results.Fidelity {
	var sum, sq float64
	var n, finite int
	f.PSNRMinDB = math.Inf(1)
	for _, s := range per {
		f.Samples++
		if s.verified {
			f.Verified++
		}
		f.MaxAbsError = max(f.MaxAbsError, s.maxAbs)
		f.MaxAbsLevels = max(f.MaxAbsLevels, s.maxAbsLevel)
		sq += s.sq
		n += s.n
		if s.sq == 0 {
			f.Identical++
			continue
		}
		p := psnr(s.sq / float64(s.n))
		sum += p
		finite++
		f.PSNRMinDB = min(f.PSNRMinDB, p)
	}
	if finite > 0 {
		f.PSNRMeanDB = sum / float64(finite)
	} else {
		f.PSNRMinDB = 0
	}
	if n > 0 && sq > 0 {
		f.PSNRPooledDB = psnr(sq / float64(n))
	}
	if f.Samples > f.Verified {
		f.Error = fmt.Sprintf("%d of %d recomputed tensors do not hash to the delivered ones: the figures are not all of the delivered tensors", f.Samples-f.Verified, f.Samples)
	}
	return f
}

// psnr is the PSNR in dB of a mean squared error on the 0-255 scale.
func psnr(mse float64) float64 { return 10 * math.Log10(255*255/mse) }

// levelsPerUnit is, per channel, the 0-255 levels one unit of p's tensors
// spans: 255 (to_tensor's scale) times each Normalize's std after it.
func levelsPerUnit(p *ops.Pipeline) ([ops.Channels]float64, error) {
	l := [ops.Channels]float64{255, 255, 255}
	tensor := false
	for j := range p.Len() {
		switch o := p.Op(j).(type) {
		case ops.ToTensor:
			tensor = true
		case ops.Normalize:
			for c := range l {
				l[c] *= float64(o.Std[c])
			}
		}
	}
	if !tensor {
		return l, fmt.Errorf("%w: %s has no to_tensor: the comparison is of float32 tensors", ErrFidelity, p.Name())
	}
	return l, nil
}

// parallel runs one over keys on every CPU, in order, and stops at the
// first error or when ctx ends.
func parallel(ctx context.Context, keys [][2]uint64, one func([2]uint64) (sample, error)) ([]sample, error) {
	out := make([]sample, len(keys))
	errs := make([]error, len(keys))
	next := make(chan int)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			for i := range next {
				if out[i], errs[i] = one(keys[i]); errs[i] != nil {
					cancel()
				}
			}
		})
	}
feed:
	for i := range keys {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, ctx.Err()
}
