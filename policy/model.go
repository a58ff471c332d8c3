// Package policy decides, per sample, how much of a preprocessing pipeline
// runs on the storage side before the sample crosses the link to the
// compute node (its split), and whether it crosses zstd-compressed. Every
// function here is pure: a profiler.Profile and the Resources go in, a Plan
// or a Prediction comes out; nothing here does I/O, starts goroutines or
// reads the clock.
//
// The model: an epoch's predicted time is the largest of four resource
// times, as if each resource were a pipeline stage working in parallel with
// the others:
//
//	link    = payload bytes crossing the link / LinkBytesPerSec
//	storage = storage CPU seconds / StorageCores
//	compute = compute CPU seconds / ComputeCores
//	gpu     = samples / GPUSamplesPerSec
//
// Split k of a sample runs ops [0:k] on storage and [k:n] on the compute
// node; CPU times are the profile's compute-node measurements, divided by
// StorageSpeed on the storage side. Where the profile has the measurements
// of the JPEG-domain crop (profiler.SampleProfile.CutBytes), a sample has
// one more option, SplitCut: its cut crosses the link, the storage side
// pays the cut and the compute side finishing it plus ops [2:n].
package policy

import (
	"math"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/profiler"
)

// SplitCut is the split of the JPEG-domain crop, ops.SplitCut: the
// storage side cuts the sample's JPEG losslessly to the crop box of ops[1]
// (random_resized_crop) without decoding it, the cut crosses the link, and
// the compute side decodes the box from it, resamples, and runs ops [2:n].
// A plan puts a sample there only when the profile has the sample's cut
// measurements (profiler.SampleProfile.HasCut). NoOff, AllOff, ResizeOff,
// FastFlow and SOPHON never do; Optimal and Bound use it.
const SplitCut = ops.SplitCut

// Plan is the one plan type: per sample, which storage node serves it,
// where its pipeline is split and how its payload crosses. Every policy
// makes one (single-node and cluster alike, its entries indexed as
// Profile.Samples), a plan file stores one (the compute agent's --plan
// FILE: IDs, Split and Default), and the compute agent runs one, looking
// samples up by id.
type Plan struct {
	// Policy names the policy that made the plan (or the plan file).
	Policy string
	// Pipeline is the ID of the pipeline the plan is for
	// (profiler.Profile.Pipeline, ops.Pipeline.ID); empty means any.
	Pipeline string
	// IDs holds each entry's sample id: the profile's, in its order, for
	// a policy's plan.
	IDs []uint64
	// Split holds each entry's split: split k runs ops [0:k] on storage;
	// SplitCut (-1) sends the JPEG cut to the crop box.
	Split []int
	// Compress holds, per entry, whether the payload crosses the link
	// zstd-compressed (never at SplitCut: a JPEG does not compress). Nil
	// means none does.
	Compress []bool
	// Replica holds, per entry, the index in Cluster.Storage of the
	// storage node that serves it, one of its replica set: a preference,
	// since a compute agent's fetchers pull from whoever holds a sample.
	// Nil for a single-node plan or a plan file: any holder.
	Replica []int16
	// Cached holds, per entry, whether the sample is resident in the
	// compute node's cache (compute-agent --cache-dir): kept there at the
	// pipeline's cache split (ops.Pipeline.CacheSplit) once the first
	// epoch has fetched it, and from then on read locally and finished
	// from that split, so it costs no link and no storage CPU. Residency is
	// fixed across epochs. Nil means no sample is cached.
	Cached []bool
	// Default is the split of a sample the plan does not list.
	Default int
	// Pred is the plan's predicted epoch. For a cluster plan its times are
	// each the largest over the nodes of that kind (the link time over
	// egress, links, the uplink and ingress), its totals sum the nodes,
	// and Cluster holds the per-node breakdown.
	Pred Prediction
	// Cluster is a cluster plan's prediction per node; nil for a
	// single-node plan.
	Cluster *ClusterPrediction
}

// Bottleneck names, as reported in Prediction.Bottleneck.
const (
	Link       = profiler.BottleneckLink
	StorageCPU = profiler.BottleneckStorageCPU
	ComputeCPU = profiler.BottleneckComputeCPU
	GPU        = profiler.BottleneckGPU
)

// Prediction is the predicted cost of one epoch under a plan.
type Prediction struct {
	// Seconds is the predicted epoch time: the largest of the four
	// resource times below.
	Seconds        float64
	LinkSeconds    float64
	StorageSeconds float64
	ComputeSeconds float64
	GPUSeconds     float64
	// Bytes is the payload crossing the link per epoch.
	Bytes float64
	// StorageCPUSeconds and ComputeCPUSeconds are CPU seconds per epoch
	// (summed over cores), storage's already scaled by StorageSpeed.
	StorageCPUSeconds float64
	ComputeCPUSeconds float64
	// Bottleneck names the resource that sets Seconds (Link, StorageCPU,
	// ComputeCPU or GPU); ties go to the first in that order.
	Bottleneck string
}

// model is a profile's options, the per-sample layer of the planner
// model (cmodel): what each option of a sample (split k, compressed or
// not, SplitCut) costs in payload bytes, storage ns and compute ns.
type model struct {
	p      *profiler.Profile
	n      int
	stride int  // options per split: 2 when any sample has compression data
	cut    bool // whether option cutOpt, SplitCut, exists
	cutOpt int  // (n+1)*stride: the last option
	// perByte is the storage ns (on the compute node's clock, like the
	// profile's) each payload byte costs to send: StorageNSPerByte times
	// the storage speed.
	perByte float64
	// ids is the profile's sample ids, made once and shared, read-only,
	// by the model's plans.
	ids []uint64
}

// sampleIDs is the profile's sample ids, in its order, shared by the
// model's plans (which must not change them).
func (m *model) sampleIDs() []uint64 {
	if m.ids == nil {
		m.ids = ids(m.p)
	}
	return m.ids
}

// newModel returns the options of p on storage CPUs of relative speed
// speed (zero meaning 1) that spend nsPerByte of their own ns sending each
// payload byte. With cut, it offers SplitCut where any sample has the
// cut's measurements (which takes a pass over the samples); without, it
// never does, as the baselines need.
func newModel(p *profiler.Profile, speed, nsPerByte float64, cut bool) *model {
	m := &model{p: p, n: p.N(), stride: 1}
	for i := range p.Samples {
		if len(p.Samples[i].Compressed) == m.n+1 {
			m.stride = 2
			break
		}
	}
	m.cutOpt = (m.n + 1) * m.stride
	if cut && m.n >= 2 {
		for i := range p.Samples {
			if p.Samples[i].HasCut() {
				m.cut = true
				break
			}
		}
	}
	if nsPerByte > 0 {
		m.perByte = nsPerByte * speedOr1(speed)
	}
	return m
}

// speedOr1 is a storage speed, zero meaning 1.
func speedOr1(speed float64) float64 {
	if speed <= 0 {
		return 1
	}
	return speed
}

// nopt is the number of options per sample: option o < cutOpt is split
// o/stride, compressed when o%stride == 1; option cutOpt, when the model
// has the cut, is SplitCut.
func (m *model) nopt() int {
	if m.cut {
		return m.cutOpt + 1
	}
	return m.cutOpt
}

func (m *model) option(split int, compress bool) int {
	o := split * m.stride
	if compress && m.stride == 2 {
		o++
	}
	return o
}

// raw holds an option's raw quantities: payload bytes, storage ns (on the
// compute node's clock) and compute ns. It is an alias so that package
// bucket, which sums them, takes a sample's options as they are.
type raw = [3]float64

// options fills buf (len nopt) with sample s's raw option quantities. An
// option the sample has no data for costs +Inf.
func (m *model) options(s *profiler.SampleProfile, buf []raw) {
	var total float64
	for _, ns := range s.OpNS {
		total += float64(ns)
	}
	hasComp := len(s.Compressed) == m.n+1
	var pre, pre2 float64
	for k := 0; k <= m.n; k++ {
		if k > 0 {
			pre += float64(s.OpNS[k-1])
		}
		if k == 2 {
			pre2 = pre
		}
		o := k * m.stride
		buf[o] = raw{float64(s.Bytes[k]), pre, total - pre}
		if m.stride == 2 {
			if hasComp {
				var cns, dns float64
				if len(s.CompressNS) == m.n+1 {
					cns = float64(s.CompressNS[k])
				}
				if len(s.DecompressNS) == m.n+1 {
					dns = float64(s.DecompressNS[k])
				}
				buf[o+1] = raw{float64(s.Compressed[k]), pre + cns, total - pre + dns}
			} else {
				inf := math.Inf(1)
				buf[o+1] = raw{inf, inf, inf}
			}
		}
	}
	if m.cut {
		buf[m.cutOpt] = m.cutRaw(s, total, pre2)
	}
	if m.perByte > 0 {
		for i := range buf[:m.nopt()] {
			buf[i][1] += buf[i][0] * m.perByte // +Inf stays +Inf
		}
	}
}

// cutRaw is the raw quantities of sample s's SplitCut option, +Inf where it
// has no cut; total is the sum of its OpNS and pre2 that of OpNS[0:2].
func (m *model) cutRaw(s *profiler.SampleProfile, total, pre2 float64) raw {
	if !s.HasCut() {
		inf := math.Inf(1)
		return raw{inf, inf, inf}
	}
	return raw{float64(s.CutBytes), float64(s.CutNS), float64(s.CutFinishNS) + total - pre2}
}

// choices converts a split/compress pair into option indices.
func (m *model) choices(split []int, compress []bool) []int32 {
	ch := make([]int32, len(m.p.Samples))
	for i := range ch {
		k := 0
		if i < len(split) {
			k = split[i]
		}
		if k == SplitCut && m.cut && m.p.Samples[i].HasCut() {
			ch[i] = int32(m.cutOpt)
			continue
		}
		k = min(max(k, 0), m.n)
		c := compress != nil && i < len(compress) && compress[i] &&
			len(m.p.Samples[i].Compressed) == m.n+1
		ch[i] = int32(m.option(k, c))
	}
	return ch
}

// ids is the profile's sample ids, in its order.
func ids(p *profiler.Profile) []uint64 {
	out := make([]uint64, len(p.Samples))
	for i := range p.Samples {
		out[i] = p.Samples[i].ID
	}
	return out
}
