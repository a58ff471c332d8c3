// Package cellbound is a testbed cell's one lower bound on any plan's
// epoch (results.CellBound): policy.Bound over the profile the cell's runs
// planned from and the cell's own resources, not those a run's stage 1
// measured.
package cellbound

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/testbed/results"
)

// Inputs are what a cell's bound is over besides the cell itself.
type Inputs struct {
	// Profile is the cell's profile file; Pipeline its pipeline (a
	// preset: its cuts are scaled to the crop boxes where it has one).
	Profile, Pipeline string
	// Dataset is the dataset's folder, whose JPEG headers give the crop
	// boxes; Seed the run seed that draws them.
	Dataset string
	Seed    uint64
	// StorageNodes and ComputeNodes are the cell's nodes (zero: 1).
	StorageNodes, ComputeNodes int
	// GPURate is the simulated GPU's samples/s; ComputeFlags the compute
	// agents' extra flags (their --workers); CacheBytes the compute
	// node's cache budget.
	GPURate      float64
	ComputeFlags []string
	CacheBytes   int64
	Log          zerolog.Logger
}

// Of is cell c's one bound (results.CellBound): policy.Bound over
// the cell's profile, the one every policy run of the cell planned from
// (in.Profile; recorded by the experiment's first run), and the
// cell's own resources: its shaped rate, its storage quota on every
// storage node, the compute cores the compute agent's model is told
// (CellComputeCores), the simulated GPU and the compute node's cache budget,
// with storage as fast as the fastest any of the cell's runs measured
// (StorageSpeed). Its cuts are scaled to the crop boxes of the cell's steady epoch,
// as the agents' plans are (profiler.CutAreas), where the dataset's
// headers say the images' sizes. The transport's CPU per byte is left
// out (free): it only raises a bound. Call it once the cell's runs are
// done.
func Of(c *results.Cell, in Inputs) *results.CellBound {
	b := &results.CellBound{
		LinkBytesPerSec:  c.PayloadBytesPerSec(),
		StorageCores:     c.StorageCPUs * float64(max(in.StorageNodes, 1)),
		ComputeCores:     CellComputeCores(c, in.ComputeFlags),
		GPUSamplesPerSec: in.GPURate,
		StorageSpeed:     StorageSpeed(c),
		Profile:          in.Profile,
	}
	if in.ComputeNodes > 1 {
		b.Error = fmt.Sprintf("%d compute nodes: each plans its own shard from its own profile", in.ComputeNodes)
		return b
	}
	prof, err := profiler.Load(in.Profile, "", "")
	if err != nil {
		b.Error = fmt.Sprintf("profile: %v", err)
		return b
	}
	b.Samples = len(prof.Samples)
	if epoch, ok := steadyEpoch(c); ok {
		if areas := cutAreas(in); areas != nil {
			prof = areas.AtEpoch(areas.Expect(prof), epoch)
			b.Epoch = &epoch
		}
	}
	res := policy.Resources{LinkBytesPerSec: b.LinkBytesPerSec, StorageCores: b.StorageCores, ComputeCores: b.ComputeCores,
		GPUSamplesPerSec: b.GPUSamplesPerSec, StorageSpeed: b.StorageSpeed, CacheBytes: float64(in.CacheBytes)}
	br, err := policy.Bound(policy.OneNode(prof, res))
	if err != nil {
		b.Error = fmt.Sprintf("bound: %v", err)
		return b
	}
	b.Seconds = br.Seconds
	for _, r := range br.Binding {
		b.Binding = append(b.Binding, r.Resource.String())
	}
	in.Log.Info().Str("rate", c.Rate).Float64("storage_cpus", c.StorageCPUs).Float64("bound_seconds", b.Seconds).
		Strs("binding", b.Binding).Msg("cell bound")
	return b
}

// StorageSpeed is the storage speed c's bound prices the storage CPU at:
// the fastest any of c's runs planned its steady epoch with (the speed the
// compute agent measured of the storage agent's ops against the profile's
// clock; Prediction.StorageSpeed), and at least 1. Both agents run on this
// machine's CPUs, but the profile is timed on the compute agent in its
// busiest epoch, which reads some ops slower than a storage agent runs
// them (1.08-1.20x on 2048 px photographs, 2026-11-30): a bound at speed 1
// then prices the storage side higher than the runs' own plans do, and a
// plan that meets its prediction beats it. The speed is a measurement, not
// a resource of the cell, so the fastest of the runs' keeps the bound below
// every run's prediction of the same plan.
func StorageSpeed(c *results.Cell) float64 {
	speed := 1.0
	for i := range c.Runs {
		run := &c.Runs[i]
		if run.Policy == results.PeerPolicy || run.Training {
			continue
		}
		if e := run.Steady(); e != nil && e.Prediction != nil {
			speed = max(speed, e.Prediction.StorageSpeed)
		}
	}
	return speed
}

// steadyEpoch is the number of the cell's steady epoch: the first policy
// run's last.
func steadyEpoch(c *results.Cell) (uint64, bool) {
	for i := range c.Runs {
		run := &c.Runs[i]
		if e := run.Steady(); e != nil && run.Policy != results.PeerPolicy && !run.Training {
			return uint64(e.Epoch), true
		}
	}
	return 0, false
}

// cutAreas scales a profile's cuts to an epoch's boxes from the
// dataset's JPEG headers, as the compute agent does from the storage
// agent's catalog (the same ids: the dataset's index order); nil where
// the pipeline has no cut or the dataset cannot be read here.
func cutAreas(in Inputs) *profiler.CutAreas {
	pipe, err := ops.Preset(in.Pipeline)
	if err != nil || !pipe.CanCut() {
		return nil
	}
	d, err := dataset.Open(in.Dataset)
	if err != nil {
		in.Log.Warn().Err(err).Msg("cell bound: no headers, cuts at their mean boxes")
		return nil
	}
	ims := make([]profiler.CutImage, d.Len())
	for id := range ims {
		h := d.Header(uint64(id))
		mw, mh := h.MCU()
		ims[id] = profiler.CutImageOf(h.Width(), h.Height(), mw, mh, h.Components())
	}
	if err := d.Close(); err != nil {
		in.Log.Warn().Err(err).Msg("cell bound: closing the dataset")
	}
	return &profiler.CutAreas{Pipe: pipe, Seed: in.Seed, Image: func(id uint64) (profiler.CutImage, bool) {
		if id >= uint64(len(ims)) || ims[id].W <= 0 {
			return profiler.CutImage{}, false
		}
		return ims[id], true
	}}
}

// CellComputeCores is the compute cores the compute agent's model plans
// cell c with: its finishing workers (computeCores) within the compute
// node's CPU quota (c.ComputeCPUs; none on loopback), as the agent itself
// takes them (internal/cpuquota).
func CellComputeCores(c *results.Cell, flags []string) float64 {
	cores := ComputeCores(flags)
	if c.ComputeCPUs > 0 {
		cores = min(cores, c.ComputeCPUs)
	}
	return cores
}

// ComputeCores is the compute agent's finishing workers: --workers in its
// extra flags, else its default, the CPUs it sees (this machine's: it is
// pinned after it started).
func ComputeCores(flags []string) float64 {
	w := runtime.NumCPU()
	for i, f := range flags {
		name, val, hasVal := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if name != "workers" || !strings.HasPrefix(f, "-") {
			continue
		}
		if !hasVal && i+1 < len(flags) {
			val = flags[i+1]
		}
		if n, err := strconv.Atoi(val); err == nil && n > 0 {
			w = n
		}
	}
	return float64(w)
}
