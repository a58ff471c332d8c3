package profiler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sophon-dl/sophon/ops"
)

// ErrNoMeasurement is a measurement that completed no work.
var ErrNoMeasurement = errors.New("profiler: nothing measured")

// MeasureComputeRate measures the compute node's CPU rate for the full
// pipeline: workers goroutines (zero or less means 1) run p on samples,
// round robin (pass k, sample i is key {Epoch: k, Sample: i}, so random ops
// draw anew on each pass), as a real epoch does (fused pairs included),
// until budget has passed; ctx ending first is its error. The rate is the runs completed over
// the wall time until the last worker stopped. A run that fails counts as
// done, since an epoch spends that time too; only when every run failed is
// that error returned. Unlike the stage 2 maths this reads the wall clock:
// it is the measurement itself.
func MeasureComputeRate(ctx context.Context, p *ops.Pipeline, samples [][]byte, budget time.Duration, workers int) (float64, error) {
	return MeasureComputeRateLimited(ctx, p, samples, budget, workers, ops.Limits{}, 0)
}

// MeasureComputeRateLimited is MeasureComputeRate with every run under
// lim ([ops.Pipeline.RunLimited]), as the agent's own runs, each with the
// deadline opTimeout after it starts (none when zero): a sample the limits
// refuse fails its run, before it costs what an unlimited decode would.
func MeasureComputeRateLimited(ctx context.Context, p *ops.Pipeline, samples [][]byte, budget time.Duration, workers int, lim ops.Limits, opTimeout time.Duration) (float64, error) {
	if len(samples) == 0 {
		return 0, fmt.Errorf("%w: no samples", ErrNoMeasurement)
	}
	workers = max(workers, 1)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var (
		next     atomic.Uint64
		done     atomic.Int64
		ok       atomic.Int64
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				pass, s := i/uint64(len(samples)), i%uint64(len(samples))
				l := lim
				if opTimeout > 0 {
					l.Deadline = time.Now().Add(opTimeout)
				}
				_, err := p.RunLimited(ops.Key{Epoch: pass, Sample: s}, ops.Encoded(samples[s]), 0, p.Len(), l)
				done.Add(1)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := parent.Err(); err != nil {
		return 0, fmt.Errorf("profiler: measure compute rate: %w", err)
	}
	if ok.Load() == 0 {
		if firstErr != nil {
			return 0, fmt.Errorf("profiler: measure compute rate: %w", firstErr)
		}
		return 0, fmt.Errorf("%w: no run finished within %v", ErrNoMeasurement, budget)
	}
	return float64(done.Load()) / elapsed.Seconds(), nil
}
