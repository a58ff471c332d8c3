package profiler

import (
	"fmt"
	"strings"
)

// Stage 1: which resource bounds an epoch under No-Off (every sample
// crosses the link raw and is preprocessed on the compute node). Offloading
// only shortens the epoch when the link is the bottleneck, so stage 2 runs
// only then, unless forced.

// Rates are what stage 1 measured, each for a bounded time. A rate of zero
// (or less) means not measured: that resource is left out of the decision.
type Rates struct {
	// LinkBytesPerSec is the raw-fetch throughput from storage to the
	// compute node. With several storage agents, each serving its share of
	// the samples, pass the rate at which the slowest one drains its share
	// scaled to the whole dataset: min over agents of B_i / share_i.
	LinkBytesPerSec float64
	// StorageSamplesPerSec is the storage node's CPU rate for the full
	// pipeline (the storage agent measures and reports it). Under No-Off
	// the storage node preprocesses nothing, so it is reported, not used.
	StorageSamplesPerSec float64
	// ComputeSamplesPerSec is the compute node's CPU rate for the full
	// pipeline, all its workers together.
	ComputeSamplesPerSec float64
	// GPUSamplesPerSec is the consumer's rate: the trainer's (or the sim's).
	GPUSamplesPerSec float64
	// MeanRawBytes is the mean raw file size.
	MeanRawBytes float64
	// Samples is the number of samples in an epoch.
	Samples int
}

// Seconds are the epoch times each resource implies under No-Off; zero
// for a resource whose rate was not measured.
type Seconds struct {
	Link    float64
	Compute float64
	GPU     float64
	// Storage is the epoch time of the storage CPU doing the whole
	// pipeline (All-Off): reported for reference, not part of No-Off.
	Storage float64
}

// Bottleneck names: stage 1's and the planner's (policy.Link and the
// others are these), one vocabulary in reports and logs.
const (
	BottleneckLink       = "link"
	BottleneckStorageCPU = "storage-cpu"
	BottleneckComputeCPU = "compute-cpu"
	BottleneckGPU        = "gpu"
	// BottleneckNone is the answer when no rate was measured.
	BottleneckNone = "none"
)

// Decision is stage 1's outcome.
type Decision struct {
	Rates   Rates
	Seconds Seconds
	// PredictedNoOffSeconds is the No-Off epoch time: the largest of the
	// link, compute and GPU times.
	PredictedNoOffSeconds float64
	// Bottleneck is the resource with that time: BottleneckLink,
	// BottleneckComputeCPU, BottleneckGPU (or BottleneckNone). A tie goes to
	// the GPU, then the compute CPU: the link is the bottleneck only when
	// it is strictly the slowest, since otherwise cutting traffic cannot
	// shorten the epoch.
	Bottleneck string
	// RunStage2 says whether to run the per-sample profile: when the link
	// is the bottleneck, or when forced.
	RunStage2 bool
	// Forced is set when stage 2 was forced.
	Forced bool
	// Reason explains RunStage2 in one sentence.
	Reason string
}

// Stage1Option changes Stage1's decision.
type Stage1Option func(*stage1Opts)

type stage1Opts struct{ force bool }

// Force makes Stage1 run stage 2 whatever the bottleneck.
func Force() Stage1Option { return func(o *stage1Opts) { o.force = true } }

// Stage1 predicts the No-Off epoch time each resource implies (link:
// Samples*MeanRawBytes/LinkBytesPerSec; compute: Samples/ComputeSamplesPerSec;
// GPU: Samples/GPUSamplesPerSec), takes the largest as the prediction and
// decides whether stage 2 should run. It is a pure function of r.
func Stage1(r Rates, opts ...Stage1Option) Decision {
	var o stage1Opts
	for _, f := range opts {
		f(&o)
	}
	n := float64(max(r.Samples, 0))
	per := func(rate, work float64) float64 {
		if rate <= 0 {
			return 0
		}
		return work / rate
	}
	d := Decision{Rates: r, Bottleneck: BottleneckNone}
	d.Seconds = Seconds{
		Link:    per(r.LinkBytesPerSec, n*max(r.MeanRawBytes, 0)),
		Compute: per(r.ComputeSamplesPerSec, n),
		GPU:     per(r.GPUSamplesPerSec, n),
		Storage: per(r.StorageSamplesPerSec, n),
	}
	// Tie order: GPU, compute, then link (strict > below).
	for _, c := range []struct {
		name     string
		s        float64
		measured bool
	}{
		{BottleneckGPU, d.Seconds.GPU, r.GPUSamplesPerSec > 0},
		{BottleneckComputeCPU, d.Seconds.Compute, r.ComputeSamplesPerSec > 0},
		{BottleneckLink, d.Seconds.Link, r.LinkBytesPerSec > 0},
	} {
		if c.measured && (d.Bottleneck == BottleneckNone || c.s > d.PredictedNoOffSeconds) {
			d.Bottleneck = c.name
			d.PredictedNoOffSeconds = c.s
		}
	}
	switch {
	case d.Bottleneck == BottleneckLink:
		d.RunStage2 = true
		d.Reason = "the link bounds the epoch: offloading can cut traffic, so run stage 2"
	case d.Bottleneck == BottleneckNone:
		d.Reason = "no rate measured: nothing to decide"
	default:
		d.Reason = fmt.Sprintf("the %s bounds the epoch, not the link: offloading cannot shorten it", d.Bottleneck)
	}
	if o.force && !d.RunStage2 {
		d.RunStage2, d.Forced = true, true
		d.Reason += "; stage 2 forced"
	}
	return d
}

// String prints each rate, the time it implies, the prediction and the
// decision, one item per line.
func (d Decision) String() string {
	var b strings.Builder
	r := d.Rates
	fmt.Fprintf(&b, "stage 1: %d samples, mean raw %.0f B\n", r.Samples, r.MeanRawBytes)
	line := func(name string, rate float64, unit string, secs float64, note string) {
		if rate <= 0 {
			fmt.Fprintf(&b, "  %-8s not measured%s\n", name, note)
			return
		}
		fmt.Fprintf(&b, "  %-8s %12.1f %-10s -> %9.2f s%s\n", name, rate, unit, secs, note)
	}
	line("link", r.LinkBytesPerSec/1e6, "MB/s", d.Seconds.Link, "")
	line("compute", r.ComputeSamplesPerSec, "samples/s", d.Seconds.Compute, "")
	line("gpu", r.GPUSamplesPerSec, "samples/s", d.Seconds.GPU, "")
	line("storage", r.StorageSamplesPerSec, "samples/s", d.Seconds.Storage, " (not used under No-Off)")
	fmt.Fprintf(&b, "  predicted No-Off epoch %.2f s, bottleneck %s\n", d.PredictedNoOffSeconds, d.Bottleneck)
	stage2 := "skip stage 2"
	if d.RunStage2 {
		stage2 = "run stage 2"
	}
	fmt.Fprintf(&b, "  decision: %s (%s)", stage2, d.Reason)
	return b.String()
}
