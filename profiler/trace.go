// Package profiler measures where an epoch's time goes: stage 1 finds the
// resource that bounds it, stage 2 records each sample's size and cost after
// every op.
package profiler

import (
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// OpCost is one op's effect on one sample.
type OpCost struct {
	// Bytes is the op's output size (see [ops.Value.Size]).
	Bytes int
	// Dur is the time the op took on this sample.
	Dur time.Duration
	// Compressed is the output's payload size under the trace's codec
	// (equal to Bytes when the codec is none or does not help).
	Compressed int
}

// SampleTrace is one sample's raw size and, per op, output size and cost.
type SampleTrace struct {
	Sample uint64
	Raw    int
	Ops    []OpCost
}

// Trace runs the whole pipeline on one sample, recording every op's output
// size and duration, and with a codec other than none, the size each output
// would have on the wire compressed with it (compression is not timed).
func Trace(p *ops.Pipeline, key ops.Key, raw []byte, codec wireform.Codec) (SampleTrace, error) {
	t := SampleTrace{Sample: key.Sample, Raw: len(raw), Ops: make([]OpCost, p.Len())}
	var werr error
	_, err := p.RunObserved(key, ops.Encoded(raw), 0, p.Len(), func(j int, out ops.Value, d time.Duration) {
		t.Ops[j] = OpCost{Bytes: out.Size(), Dur: d, Compressed: out.Size()}
		if codec == wireform.CodecNone || werr != nil {
			return
		}
		w, err := wireform.Encode(out, codec)
		if err != nil {
			werr = err
			return
		}
		info, err := wireform.ReadHeader(w)
		if err != nil {
			werr = err
			return
		}
		t.Ops[j].Compressed = int(info.StoredLen)
	})
	if err == nil {
		err = werr
	}
	return t, err
}

// SplitSummary describes split point k over a set of traces: what would
// cross the link if every sample were cut there.
type SplitSummary struct {
	K int
	// Name is the op after which the split falls ("raw" for k = 0).
	Name string
	// MeanBytes is the mean size crossing the link.
	MeanBytes float64
	// MeanCompressed is the mean payload size under the trace's codec.
	MeanCompressed float64
	// Smaller is the fraction of samples smaller here than raw.
	Smaller float64
	// MeanOpDur is the mean duration of op k-1 (zero for k = 0).
	MeanOpDur time.Duration
	// MeanPrefixDur is the mean duration of ops[0:k]: the storage CPU a
	// split at k costs per sample.
	MeanPrefixDur time.Duration
}

// Summarize returns one SplitSummary per split point 0..n.
func Summarize(p *ops.Pipeline, traces []SampleTrace) []SplitSummary {
	n := p.Len()
	out := make([]SplitSummary, n+1)
	for k := range out {
		out[k].K = k
		out[k].Name = "raw"
		if k > 0 {
			out[k].Name = p.Op(k - 1).Name()
		}
	}
	if len(traces) == 0 {
		return out
	}
	sums := make([]float64, n+1)
	comp := make([]float64, n+1)
	smaller := make([]int, n+1)
	opDur := make([]time.Duration, n+1)
	prefix := make([]time.Duration, n+1)
	for _, t := range traces {
		sums[0] += float64(t.Raw)
		comp[0] += float64(t.Raw)
		var acc time.Duration
		for j, c := range t.Ops {
			acc += c.Dur
			sums[j+1] += float64(c.Bytes)
			comp[j+1] += float64(c.Compressed)
			if c.Bytes < t.Raw {
				smaller[j+1]++
			}
			opDur[j+1] += c.Dur
			prefix[j+1] += acc
		}
	}
	m := float64(len(traces))
	for k := range out {
		out[k].MeanBytes = sums[k] / m
		out[k].MeanCompressed = comp[k] / m
		out[k].Smaller = float64(smaller[k]) / m
		out[k].MeanOpDur = time.Duration(float64(opDur[k]) / m)
		out[k].MeanPrefixDur = time.Duration(float64(prefix[k]) / m)
	}
	return out
}
