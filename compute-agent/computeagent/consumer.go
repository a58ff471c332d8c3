package computeagent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/batch"
	"github.com/sophon-dl/sophon/compute-agent/engine"
)

// Batch is what the GPU consumer receives: B samples stacked into one
// float32 buffer laid out [B, C, H, W], with their labels.
type Batch = batch.Batch

// Consumer is the GPU side: it takes one batch at a time. Consume blocks
// for as long as the step takes.
type Consumer = engine.Consumer

// Discard consumes batches instantly.
type Discard struct{}

// Consume implements [Consumer].
func (Discard) Consume(ctx context.Context, _ *Batch) error { return ctx.Err() }

// Sim simulates a training step: it sleeps through its clock for Step per
// batch, or, when PerSample is set, for PerSample times the batch's size.
type Sim struct {
	Name      string
	Step      time.Duration
	PerSample time.Duration
	Clock     Clock
}

// Consume implements [Consumer].
func (s *Sim) Consume(ctx context.Context, b *Batch) error {
	d := s.Step
	if s.PerSample > 0 {
		d = s.PerSample * time.Duration(b.Len())
	}
	c := s.Clock
	if c == nil {
		c = SystemClock()
	}
	return c.Sleep(ctx, d)
}

// SimPresets are training throughputs in img/s at batch 128 on a V100.
var SimPresets = map[string]float64{
	"alexnet-v100":  1150,
	"resnet50-v100": 360,
}

// ParseGPU builds a consumer from its flag form: sim:PRESET (see
// SimPresets), sim:RATE (img/s) or sim:step=DURATION (per batch).
func ParseGPU(s string, clock Clock) (*Sim, error) {
	rest, ok := strings.CutPrefix(s, "sim:")
	if !ok {
		return nil, configErr("gpu %q: want sim:PRESET, sim:RATE or sim:step=DURATION", s)
	}
	if step, ok := strings.CutPrefix(rest, "step="); ok {
		d, err := time.ParseDuration(step)
		if err != nil || d < 0 {
			return nil, configErr("gpu %q: bad step duration", s)
		}
		return &Sim{Name: s, Step: d, Clock: clock}, nil
	}
	rate, ok := SimPresets[rest]
	if !ok {
		r, err := strconv.ParseFloat(rest, 64)
		if err != nil || !(r > 0) {
			return nil, configErr("gpu %q: unknown preset (known: alexnet-v100, resnet50-v100) and not a positive rate", s)
		}
		rate = r
	}
	return &Sim{Name: s, PerSample: time.Duration(float64(time.Second) / rate), Clock: clock}, nil
}

// String describes the consumer.
func (s *Sim) String() string {
	if s.PerSample > 0 {
		return fmt.Sprintf("%s (%.0f img/s)", s.Name, float64(time.Second)/float64(s.PerSample))
	}
	return fmt.Sprintf("%s (%v per batch)", s.Name, s.Step)
}

// Rate is the samples per second the sim consumes at batch size batch:
// 1/PerSample, or batch/Step; zero (unknown, so unlimited) when neither is
// set.
func (s *Sim) Rate(batch int) float64 {
	switch {
	case s.PerSample > 0:
		return float64(time.Second) / float64(s.PerSample)
	case s.Step > 0 && batch > 0:
		return float64(batch) / s.Step.Seconds()
	}
	return 0
}
