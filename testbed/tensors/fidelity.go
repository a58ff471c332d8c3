package tensors

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

	"github.com/sophon-dl/sophon/compute-agent/batch"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
)

// EncodeOp is the op that makes a pipeline lossy: a JPEG round trip.
const EncodeOp = "encode_jpeg"

// ErrCompare: the fidelity comparison could not be made.
var ErrCompare = errors.New("tensors: cannot compare")

// LossyAt is the index of p's first encode_jpeg op, or -1 for a lossless
// pipeline.
func LossyAt(p *ops.Pipeline) int {
	return slices.IndexFunc(p.Spec().Ops, func(o ops.OpSpec) bool { return o.Op == EncodeOp })
}

// Fidelity is a lossy pipeline's tensors (one with encode_jpeg) against a
// lossless pipeline's for the same (seed, epoch, sample), over the samples
// one of its runs delivered: the testbed recomputes each delivered tensor
// from the dataset with package ops, checks that it hashes to what the
// compute agent delivered, and compares it with the lossless pipeline's.
type Fidelity struct {
	// Pipeline is the lossy pipeline, Reference the lossless one.
	Pipeline  string `json:"pipeline"`
	Reference string `json:"reference"`
	// Run names the run whose delivered samples were compared: its cell
	// and policy.
	Run string `json:"run,omitempty"`
	// Samples is the (epoch, sample) pairs compared; Verified those whose
	// recomputed tensor hashed to the delivered one (all of them, or the
	// figures are not of the delivered tensors); Identical those equal to
	// the reference's (left out of the PSNR mean and minimum, being
	// infinite).
	Samples   int `json:"samples"`
	Verified  int `json:"verified"`
	Identical int `json:"identical,omitempty"`
	// PSNRMeanDB is the mean over the samples of each one's PSNR, and
	// PSNRMinDB the least, in dB, on the 0-255 scale of the decoded crop:
	// Normalize undone, each tensor value times its channel's std times
	// 255; PSNRPooledDB is over every value of every sample together.
	PSNRMeanDB   float64 `json:"psnr_mean_db,omitempty"`
	PSNRMinDB    float64 `json:"psnr_min_db,omitempty"`
	PSNRPooledDB float64 `json:"psnr_pooled_db,omitempty"`
	// MaxAbsError is the largest absolute difference of one tensor value,
	// in the tensors' own (normalized) units; MaxAbsLevels the same on the
	// 0-255 scale.
	MaxAbsError  float64 `json:"max_abs_error"`
	MaxAbsLevels float64 `json:"max_abs_levels"`
	// Seconds is the comparison's wall time.
	Seconds float64 `json:"seconds,omitempty"`
	// Error is why the figures are missing or partial.
	Error string `json:"error,omitempty"`
}

// Line is f as one line for people.
func (f *Fidelity) Line() string {
	s := fmt.Sprintf("%s against %s", f.Pipeline, f.Reference)
	if f.Samples > 0 {
		s += fmt.Sprintf(": PSNR mean %.2f dB, min %.2f dB, pooled %.2f dB; max abs error %.4f (%.1f levels of 255); over %d delivered samples, %d of them verified by hash",
			f.PSNRMeanDB, f.PSNRMinDB, f.PSNRPooledDB, f.MaxAbsError, f.MaxAbsLevels, f.Samples, f.Verified)
		if f.Identical > 0 {
			s += fmt.Sprintf(", %d identical", f.Identical)
		}
		if f.Run != "" {
			s += " (" + f.Run + ")"
		}
	}
	if f.Error != "" {
		s += "; error: " + f.Error
	}
	return s
}

// Compare recomputes, for every delivered (epoch, sample) of got
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
func Compare(ctx context.Context, data string, seed uint64, lossy, lossless *ops.Pipeline, got map[[2]uint64]string) (Fidelity, error) {
	f := Fidelity{Pipeline: lossy.Name(), Reference: lossless.Name()}
	k := LossyAt(lossy)
	if k < 0 || LossyAt(lossless) >= 0 {
		return f, fmt.Errorf("%w: %s is not lossy or %s not lossless", ErrCompare, lossy.Name(), lossless.Name())
	}
	levels, err := levelsPerUnit(lossless)
	if err != nil {
		return f, err
	}
	shared := k <= lossless.Len() && reflect.DeepEqual(lossy.Spec().Ops[:k], lossless.Spec().Ops[:k])
	d, err := dataset.Open(data)
	if err != nil {
		return f, fmt.Errorf("%w: dataset: %w", ErrCompare, err)
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
			return sample{}, fmt.Errorf("%w: sample %d of %d", ErrCompare, key[1], d.Len())
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
			return sample{}, fmt.Errorf("%w: sample %d: the pipelines' outputs are not tensors of one shape", ErrCompare, key[1])
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
func summarise(f Fidelity, per []sample) Fidelity {
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
		return l, fmt.Errorf("%w: %s has no to_tensor: the comparison is of float32 tensors", ErrCompare, p.Name())
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
