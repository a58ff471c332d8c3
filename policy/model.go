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
//
// The LP relaxation of that model, its Lagrangian dual and the search for
// the dual's weights, from which Bound and Optimal take the lower bound,
// are package relax's (policy/internal/relax); this package indexes the
// model for it and answers for the plans and the bound it reports.
package policy

import (
	"fmt"
	"math"
	"slices"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy/internal/relax"
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
	// perSample is the compute ns every sample costs beyond its ops
	// (Resources.ComputeNSPerSample), whatever its option.
	perSample float64
	// ids is the profile's sample ids, made once and shared, read-only,
	// by the model's plans.
	ids []uint64
}

// sampleIDs is the profile's sample ids, in its order, shared by the
// model's plans (which must not change them).
func (m *model) sampleIDs() []uint64 {
	if m.ids == nil {
		m.ids = make([]uint64, len(m.p.Samples))
		for i := range m.p.Samples {
			m.ids[i] = m.p.Samples[i].ID
		}
	}
	return m.ids
}

// newModel returns the options of p on storage CPUs of relative speed
// speed (positive) that spend nsPerByte of their own ns sending each
// payload byte. With cut, it offers SplitCut where any sample has the
// cut's measurements (which takes a pass over the samples); without, it
// never does, as the baselines need.
func newModel(p *profiler.Profile, speed, nsPerByte, perSample float64, cut bool) *model {
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
		m.perByte = nsPerByte * speed
	}
	m.perSample = max(perSample, 0)
	return m
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
	if m.perByte > 0 || m.perSample > 0 {
		for i := range buf[:m.nopt()] {
			buf[i][1] += buf[i][0] * m.perByte // +Inf stays +Inf
			buf[i][2] += m.perSample
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

// choices converts a split/compress pair into option indices, read as
// Predict reads them.
func (m *model) choices(split []int, compress []bool) []uint8 {
	ch := make([]uint8, len(m.p.Samples))
	for i := range ch {
		k := 0
		if i < len(split) {
			k = split[i]
		}
		if k == SplitCut && m.cut && m.p.Samples[i].HasCut() {
			ch[i] = uint8(m.cutOpt)
			continue
		}
		k = min(max(k, 0), m.n)
		c := compress != nil && i < len(compress) && compress[i] &&
			len(m.p.Samples[i].Compressed) == m.n+1
		ch[i] = uint8(m.option(k, c))
	}
	return ch
}

// Resource kinds a cluster adds to the single-node ones (Link, StorageCPU,
// ComputeCPU, GPU), as reported in ClusterResource.Kind. In a cluster, Link
// is a capped (storage, compute) pair, StorageCPU and ComputeCPU one node's
// cores and GPU one node's ranks.
const (
	StorageEgress  = "storage-egress"
	ComputeIngress = "compute-ingress"
	SharedUplink   = "uplink"
)

// ClusterResource names one resource of a cluster.
type ClusterResource struct {
	// Kind is StorageEgress, Link, SharedUplink, ComputeIngress,
	// StorageCPU, ComputeCPU or GPU.
	Kind string
	// Storage names the storage node of StorageEgress, StorageCPU and
	// Link; empty otherwise.
	Storage string
	// Compute names the compute node of ComputeIngress, ComputeCPU, GPU
	// and Link; empty otherwise.
	Compute string
}

// String is the kind followed by the node(s): "storage-egress s1",
// "link s1->c2", "uplink".
func (r ClusterResource) String() string {
	switch {
	case r.Storage != "" && r.Compute != "":
		return r.Kind + " " + r.Storage + "->" + r.Compute
	case r.Storage != "":
		return r.Kind + " " + r.Storage
	case r.Compute != "":
		return r.Kind + " " + r.Compute
	}
	return r.Kind
}

// StorageLoad is what a plan asks of one storage node per epoch.
type StorageLoad struct {
	// Samples is the number of samples the node serves.
	Samples int
	// Bytes is the payload it sends.
	Bytes float64
	// CPUSeconds is the preprocessing CPU time it spends, already scaled
	// by the cluster's StorageSpeed.
	CPUSeconds float64
	// CPUTime and EgressTime are the epoch seconds its cores and its
	// egress need: CPUSeconds/Cores and Bytes/EgressBytesPerSec (zero when
	// unlimited).
	CPUTime, EgressTime float64
}

// ComputeLoad is what a plan asks of one compute node per epoch.
type ComputeLoad struct {
	// Samples is the number of samples its ranks train on.
	Samples int
	// Bytes is the payload it receives.
	Bytes float64
	// CPUSeconds is the CPU time of finishing its samples' pipelines.
	CPUSeconds float64
	// CPUTime, IngressTime and GPUTime are the epoch seconds its cores,
	// its ingress and its slowest rank's GPU share need (zero when
	// unlimited). GPUTime does not depend on the plan.
	CPUTime, IngressTime, GPUTime float64
}

// LinkLoad is the payload crossing one capped pair (Cluster.Links).
type LinkLoad struct {
	// Bytes is the payload crossing the pair.
	Bytes float64
	// Time is Bytes over the cap (zero when the cap is zero, unlimited).
	Time float64
}

// ClusterPrediction is the predicted cost of one epoch under a cluster
// plan. DDP is synchronous, so the epoch is the slowest rank's: Seconds is
// the largest time over every resource of every node, every capped pair
// and the shared uplink.
type ClusterPrediction struct {
	// Seconds is the predicted epoch time.
	Seconds float64
	// Bottleneck is the resource that sets Seconds; ties go to the first
	// in the order: egress, links, uplink, ingress (each by node), storage
	// CPU, compute CPU, GPU.
	Bottleneck ClusterResource
	// Storage and Compute hold one entry per node, indexed as the
	// Cluster's; Links one per Cluster.Links entry.
	Storage []StorageLoad
	Compute []ComputeLoad
	Links   []LinkLoad
	// UplinkTime is the epoch seconds the shared uplink needs.
	UplinkTime float64
	// Bytes, StorageCPUSeconds and ComputeCPUSeconds are totals over the
	// nodes.
	Bytes, StorageCPUSeconds, ComputeCPUSeconds float64
}

// cmodel is a profile, a cluster and a placement, indexed for planning:
// the relaxation's Problem (the limited resources with their ids, in the
// bottleneck order, and each sample's options and replica set) and what
// the model's predictions and plans need beside it.
type cmodel struct {
	relax.Problem
	m  *model
	c  *Cluster
	pl *Placement

	// res names the limited resources, by id.
	res []ClusterResource
	// linkOf is, per pair, its index in Cluster.Links, -1 if none.
	linkOf []int32

	gpu    []float64 // per compute node: its slowest rank's GPU seconds
	gpuMax float64

	// exactLimit is the most joint assignments exact enumerates
	// (clusterExactLimit; tests change it).
	exactLimit int
	// pass is the improvement pass's rules: clusterPass, or singlePass for
	// the single-node policies.
	pass passRules
}

// newCModel validates everything and indexes it. With cut, the model
// offers SplitCut where the profile has cut data.
func newCModel(p *profiler.Profile, c *Cluster, pl *Placement, cut bool) (*cmodel, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := checkProfile(p); err != nil {
		return nil, err
	}
	if err := pl.check(c, len(p.Samples)); err != nil {
		return nil, err
	}
	return indexModel(p, c, pl, cut), nil
}

// checkProfile checks that the planner can index p: at most MaxClusterOps
// ops, and every sample's sizes and op costs as many as its ops need.
func checkProfile(p *profiler.Profile) error {
	if p == nil {
		return clusterErr(ErrClusterProfile, "profile", "nil")
	}
	if p.N() > MaxClusterOps {
		return clusterErr(ErrClusterProfile, "profile.ops", "%d ops, at most %d", p.N(), MaxClusterOps)
	}
	for i := range p.Samples {
		s := &p.Samples[i]
		if len(s.Bytes) != p.N()+1 || len(s.OpNS) != p.N() {
			return clusterErr(ErrClusterProfile, fmt.Sprintf("samples[%d]", i), "%d sizes and %d op costs for %d ops", len(s.Bytes), len(s.OpNS), p.N())
		}
	}
	return nil
}

// indexModel indexes a profile, a cluster and a placement that are valid
// together (newCModel checks that).
func indexModel(p *profiler.Profile, c *Cluster, pl *Placement, cut bool) *cmodel {
	m := newModel(p, c.Speed(), c.StorageNSPerByte, c.ComputeNSPerSample, cut)
	cm := &cmodel{m: m, c: c, pl: pl, exactLimit: clusterExactLimit, pass: clusterPass}
	cm.Problem = relax.Problem{
		Resources: relax.Resources{NS: len(c.Storage), NC: len(c.Compute)},
		N:         len(p.Samples), Nopt: m.nopt(),
		Options: func(i int, buf []raw) { m.options(&p.Samples[i], buf) },
		Layout:  relax.Layout{Stride: m.stride, CutOpt: m.cutOpt, Cut: m.cut},
		Rank:    pl.Rank, Set: pl.Set, Sets: pl.Sets, Canon: relax.CanonSets(pl.Sets),
		ExactBuckets: relax.BucketExact,
	}
	cm.Node = make([]int32, 0, c.Ranks())
	for k, n := range c.Compute {
		for range max(n.Ranks, 1) {
			cm.Node = append(cm.Node, int32(k))
		}
	}
	ns, nc := cm.NS, cm.NC
	cm.SCPU, cm.SEgr, cm.SCPUs, cm.SEgrs = make([]int32, ns), make([]int32, ns), make([]float64, ns), make([]float64, ns)
	cm.CIng, cm.CCPU, cm.CIngs, cm.CCPUs = make([]int32, nc), make([]int32, nc), make([]float64, nc), make([]float64, nc)
	cm.Link, cm.Links, cm.linkOf = make([]int32, ns*nc), make([]float64, ns*nc), make([]int32, ns*nc)
	// add gives a resource with a limit an id; per is its seconds per
	// unit: 1/limit for bytes, the ns's share of a second over the cores
	// for CPUs.
	add := func(limit, per float64, r ClusterResource) (int32, float64) {
		if limit <= 0 {
			return -1, 0
		}
		cm.res = append(cm.res, r)
		return int32(len(cm.res) - 1), per
	}
	for j, s := range c.Storage {
		cm.SEgr[j], cm.SEgrs[j] = add(s.EgressBytesPerSec, 1/s.EgressBytesPerSec, ClusterResource{Kind: StorageEgress, Storage: s.Name})
	}
	for i := range cm.Link {
		cm.Link[i], cm.linkOf[i] = -1, -1
	}
	sIdx, cIdx := map[string]int{}, map[string]int{}
	for j, s := range c.Storage {
		sIdx[s.Name] = j
	}
	for k, n := range c.Compute {
		cIdx[n.Name] = k
	}
	for li, l := range c.Links {
		pi := sIdx[l.Storage]*nc + cIdx[l.Compute]
		cm.linkOf[pi] = int32(li)
		cm.Link[pi], cm.Links[pi] = add(l.BytesPerSec, 1/l.BytesPerSec, ClusterResource{Kind: Link, Storage: l.Storage, Compute: l.Compute})
	}
	cm.Up, cm.Ups = add(c.SharedUplinkBytesPerSec, 1/c.SharedUplinkBytesPerSec, ClusterResource{Kind: SharedUplink})
	for k, n := range c.Compute {
		cm.CIng[k], cm.CIngs[k] = add(n.IngressBytesPerSec, 1/n.IngressBytesPerSec, ClusterResource{Kind: ComputeIngress, Compute: n.Name})
	}
	for j, s := range c.Storage {
		cm.SCPU[j], cm.SCPUs[j] = add(s.Cores, 1e-9/(c.Speed()*s.Cores), ClusterResource{Kind: StorageCPU, Storage: s.Name})
	}
	for k, n := range c.Compute {
		cm.CCPU[k], cm.CCPUs[k] = add(n.Cores, 1e-9/n.Cores, ClusterResource{Kind: ComputeCPU, Compute: n.Name})
	}
	cm.NRes = len(cm.res)
	// GPU seconds: each rank gets an equal share of its node's rate.
	perRank := make([]float64, len(cm.Node))
	for _, r := range pl.Rank {
		perRank[r]++
	}
	cm.gpu = make([]float64, nc)
	for r, n := range perRank {
		k := cm.Node[r]
		if g := c.Compute[k].GPUSamplesPerSec; g > 0 {
			cm.gpu[k] = max(cm.gpu[k], n*float64(max(c.Compute[k].Ranks, 1))/g)
		}
	}
	cm.gpuMax = slices.Max(cm.gpu)
	return cm
}

// epoch is the predicted epoch time of resource loads l.
func (cm *cmodel) epoch(l []float64) float64 {
	t := cm.gpuMax
	for _, x := range l {
		t = max(t, x)
	}
	return t
}

// predict builds a ClusterPrediction from pair totals.
func (cm *cmodel) predict(pt []relax.Totals) ClusterPrediction {
	c := cm.c
	pr := ClusterPrediction{
		Storage: make([]StorageLoad, cm.NS),
		Compute: make([]ComputeLoad, cm.NC),
		Links:   make([]LinkLoad, len(c.Links)),
	}
	// Each node's ns, from which its CPU time follows as it does in the
	// planner's loads.
	sns, cns := make([]float64, cm.NS), make([]float64, cm.NC)
	for j := range cm.NS {
		for k := range cm.NC {
			t := pt[j*cm.NC+k]
			sns[j] += t.S
			cns[k] += t.P
			s, n := &pr.Storage[j], &pr.Compute[k]
			s.Samples += int(t.N)
			s.Bytes += t.B
			s.CPUSeconds += t.S * 1e-9 / c.Speed()
			n.Samples += int(t.N)
			n.Bytes += t.B
			n.CPUSeconds += t.P * 1e-9
			if li := cm.linkOf[j*cm.NC+k]; li >= 0 {
				pr.Links[li].Bytes = t.B
				pr.Links[li].Time = t.B * cm.Links[j*cm.NC+k]
			}
		}
	}
	for j := range pr.Storage {
		s := &pr.Storage[j]
		s.EgressTime = s.Bytes * cm.SEgrs[j]
		s.CPUTime = sns[j] * cm.SCPUs[j]
		pr.Bytes += s.Bytes
		pr.StorageCPUSeconds += s.CPUSeconds
	}
	for k := range pr.Compute {
		n := &pr.Compute[k]
		n.IngressTime = n.Bytes * cm.CIngs[k]
		n.CPUTime = cns[k] * cm.CCPUs[k]
		n.GPUTime = cm.gpu[k]
		pr.ComputeCPUSeconds += n.CPUSeconds
	}
	pr.UplinkTime = pr.Bytes * cm.Ups
	// The bottleneck, in the documented order.
	pr.Seconds = -1
	consider := func(t float64, r ClusterResource) {
		if t > pr.Seconds {
			pr.Seconds, pr.Bottleneck = t, r
		}
	}
	for j, s := range pr.Storage {
		consider(s.EgressTime, ClusterResource{Kind: StorageEgress, Storage: c.Storage[j].Name})
	}
	for i, l := range pr.Links {
		consider(l.Time, ClusterResource{Kind: Link, Storage: c.Links[i].Storage, Compute: c.Links[i].Compute})
	}
	consider(pr.UplinkTime, ClusterResource{Kind: SharedUplink})
	for k, n := range pr.Compute {
		consider(n.IngressTime, ClusterResource{Kind: ComputeIngress, Compute: c.Compute[k].Name})
	}
	for j, s := range pr.Storage {
		consider(s.CPUTime, ClusterResource{Kind: StorageCPU, Storage: c.Storage[j].Name})
	}
	for k, n := range pr.Compute {
		consider(n.CPUTime, ClusterResource{Kind: ComputeCPU, Compute: c.Compute[k].Name})
	}
	for k, n := range pr.Compute {
		consider(n.GPUTime, ClusterResource{Kind: GPU, Compute: c.Compute[k].Name})
	}
	return pr
}

// optRaw is sample s's raw quantities at option o (as options fills them,
// without filling the others), sending its payload included.
func (m *model) optRaw(s *profiler.SampleProfile, o int) raw {
	q := m.optRawOps(s, o)
	q[1] += q[0] * m.perByte // +Inf stays +Inf
	q[2] += m.perSample
	return q
}

// optRawOps is optRaw without the transport term.
func (m *model) optRawOps(s *profiler.SampleProfile, o int) raw {
	var total, pre, pre2 float64
	for j, ns := range s.OpNS {
		total += float64(ns)
		if j < 2 {
			pre2 += float64(ns)
		}
	}
	if m.cut && o == m.cutOpt {
		return m.cutRaw(s, total, pre2)
	}
	k := o / m.stride
	for _, ns := range s.OpNS[:k] {
		pre += float64(ns)
	}
	if o%m.stride == 0 {
		return raw{float64(s.Bytes[k]), pre, total - pre}
	}
	if len(s.Compressed) != m.n+1 {
		inf := math.Inf(1)
		return raw{inf, inf, inf}
	}
	q := raw{float64(s.Compressed[k]), pre, total - pre}
	if len(s.CompressNS) == m.n+1 {
		q[1] += float64(s.CompressNS[k])
	}
	if len(s.DecompressNS) == m.n+1 {
		q[2] += float64(s.DecompressNS[k])
	}
	return q
}

// pairTotals sums the plan (replica, option) per (storage, compute) pair.
func (cm *cmodel) pairTotals(rep []int16, opt []uint8) []relax.Totals {
	pt := make([]relax.Totals, cm.NS*cm.NC)
	for i := range cm.m.p.Samples {
		q := cm.m.optRaw(&cm.m.p.Samples[i], int(opt[i]))
		t := &pt[int(rep[i])*cm.NC+int(cm.Node[cm.pl.Rank[i]])]
		t.B += q[0]
		t.S += q[1]
		t.P += q[2]
		t.N++
	}
	return pt
}

// plan turns replicas and options into a Plan.
func (cm *cmodel) plan(name string, rep []int16, opt []uint8) Plan {
	m := cm.m
	pl := Plan{Policy: name, Pipeline: m.p.Pipeline, IDs: m.sampleIDs(), Replica: rep, Split: make([]int, len(opt))}
	for i, o := range opt {
		if m.cut && int(o) == m.cutOpt {
			pl.Split[i] = SplitCut
			continue
		}
		pl.Split[i] = int(o) / m.stride
		if m.stride == 2 && o%2 == 1 {
			if pl.Compress == nil {
				pl.Compress = make([]bool, len(opt))
			}
			pl.Compress[i] = true
		}
	}
	cp := cm.predict(cm.pairTotals(rep, opt))
	pl.Pred, pl.Cluster = cp.Totals(), &cp
	return pl
}

// Totals is the prediction in the single-node vocabulary: each time the
// largest over the nodes of its kind (LinkSeconds over storage egress,
// capped links, the shared uplink and compute ingress), the totals over
// every node, and the bottleneck's kind (Link for any of the four
// network resources).
func (cp ClusterPrediction) Totals() Prediction {
	pr := Prediction{Seconds: cp.Seconds, Bytes: cp.Bytes, StorageCPUSeconds: cp.StorageCPUSeconds, ComputeCPUSeconds: cp.ComputeCPUSeconds,
		LinkSeconds: cp.UplinkTime}
	for _, s := range cp.Storage {
		pr.LinkSeconds = max(pr.LinkSeconds, s.EgressTime)
		pr.StorageSeconds = max(pr.StorageSeconds, s.CPUTime)
	}
	for _, l := range cp.Links {
		pr.LinkSeconds = max(pr.LinkSeconds, l.Time)
	}
	for _, c := range cp.Compute {
		pr.LinkSeconds = max(pr.LinkSeconds, c.IngressTime)
		pr.ComputeSeconds = max(pr.ComputeSeconds, c.CPUTime)
		pr.GPUSeconds = max(pr.GPUSeconds, c.GPUTime)
	}
	switch pr.Bottleneck = cp.Bottleneck.Kind; pr.Bottleneck {
	case StorageEgress, ComputeIngress, SharedUplink:
		pr.Bottleneck = Link
	}
	return pr
}

// Predict returns the predicted epoch of in when sample i is served from
// storage node replica[i] with split[i] and, where compress is non-nil
// and the sample has compression data, compressed when compress[i]. A
// split is clamped to [0, n], except SplitCut, which is predicted at the
// cut where the profile has the sample's cut measurements (compress[i] is
// then ignored) and as split 0 where it has not: a sample that cannot be
// cut crosses the link raw. On a one-node instance replica may be nil
// (the one storage node) and short slices read as split 0, uncompressed.
// It fails when the cluster, the placement or the profile is invalid, and
// on a cluster when the slices' lengths differ from the profile's sample
// count (compress may be nil) or a sample's replica is not in its replica
// set (ErrClusterPlan).
func Predict(in Instance, replica []int16, split []int, compress []bool) (ClusterPrediction, error) {
	cm, err := in.model(slices.Contains(split, SplitCut))
	if err != nil {
		return ClusterPrediction{}, err
	}
	n, pl := len(in.Profile.Samples), in.Placement
	if in.one {
		return cm.predictSplits(make([]int16, n), split, compress), nil
	}
	if len(replica) != n || len(split) != n || (compress != nil && len(compress) != n) {
		return ClusterPrediction{}, clusterErr(ErrClusterPlan, "plan", "%d replicas, %d splits, %d compress for %d samples", len(replica), len(split), len(compress), n)
	}
	for i, j := range replica {
		if !slices.Contains(pl.Sets[pl.Set[i]], j) {
			return ClusterPrediction{}, clusterErr(ErrClusterPlan, fmt.Sprintf("replica[%d]", i), "storage node %d does not hold the sample (set %v)", j, pl.Sets[pl.Set[i]])
		}
	}
	return cm.predictSplits(replica, split, compress), nil
}

// predictSplits is the prediction of serving sample i from replica[i] with
// split[i] and compress[i], read as Predict reads them.
func (cm *cmodel) predictSplits(replica []int16, split []int, compress []bool) ClusterPrediction {
	return cm.predict(cm.pairTotals(replica, cm.m.choices(split, compress)))
}
