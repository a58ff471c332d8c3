package experiment

import (
	"context"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/testbed/tensors"
)

// fidelitySource is where a lossy pipeline's fidelity is computed from:
// the samples file of its first exactly-once run, and that run's name.
type fidelitySource struct{ samples, run string }

// fidelity is Results.Fidelity: each lossy pipeline of Config.Pipelines
// (with encode_jpeg) against the first lossless one, over the samples
// its first exactly-once 1 x 1 run delivered (x.fidelityFrom). Nil when
// there is no such pair.
func (x *experiment) fidelity(ctx context.Context) []tensors.Fidelity {
	var lossless *ops.Pipeline
	var lossy []*ops.Pipeline
	for _, name := range x.cfg.Pipelines {
		p, err := ops.LoadPipeline(name)
		if err != nil {
			continue // the agents said why
		}
		switch {
		case tensors.LossyAt(p) >= 0:
			lossy = append(lossy, p)
		case lossless == nil:
			lossless = p
		}
	}
	if lossless == nil || len(lossy) == 0 {
		return nil
	}
	var out []tensors.Fidelity
	for _, p := range lossy {
		f := tensors.Fidelity{Pipeline: p.Name(), Reference: lossless.Name()}
		src, ok := x.fidelityFrom[p.Name()]
		if !ok {
			f.Error = "no exactly-once 1 x 1 run of it delivered samples to compare"
			out = append(out, f)
			continue
		}
		began := time.Now()
		l, err := tensors.Read(src.samples)
		if err == nil {
			f, err = tensors.Compare(ctx, x.res.Dataset.Path, x.cfg.Seed, p, lossless, l.Got)
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
