package experiment

import (
	"fmt"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/testbed/results"
)

// cellBound is cell c's one bound (results.CellBound): policy.Bound over
// the cell's profile, the one every policy run of the cell planned from
// (useCellProfile; recorded by the experiment's first run), and the
// cell's own resources: its shaped rate, its storage quota on every
// storage node, the compute cores the compute agent's model is told
// (cellComputeCores), the simulated GPU and the compute node's cache budget,
// with storage as fast as compute (both agents run on this machine's
// CPUs). Its cuts are scaled to the crop boxes of the cell's steady epoch,
// as the agents' plans are (profiler.CutAreas), where the dataset's
// headers say the images' sizes. The transport's CPU per byte is left
// out (free): it only raises a bound. Call it once the cell's runs are
// done.
func (x *experiment) cellBound(c *results.Cell) *results.CellBound {
	b := &results.CellBound{
		LinkBytesPerSec:  c.RateBitsPerSec / 8,
		StorageCores:     c.StorageCPUs * float64(max(x.cfg.StorageNodes, 1)),
		ComputeCores:     cellComputeCores(c, x.cfg.ComputeFlags),
		GPUSamplesPerSec: x.cfg.GPURate,
		StorageSpeed:     1,
		Profile:          x.cellProfile,
	}
	if x.cfg.ComputeNodes > 1 {
		b.Error = fmt.Sprintf("%d compute nodes: each plans its own shard from its own profile", x.cfg.ComputeNodes)
		return b
	}
	prof, err := profiler.Load(x.cellProfile, "", "")
	if err != nil {
		b.Error = fmt.Sprintf("profile: %v", err)
		return b
	}
	b.Samples = len(prof.Samples)
	if epoch, ok := steadyEpoch(c); ok {
		if areas := x.cutAreas(); areas != nil {
			prof = areas.AtEpoch(areas.Expect(prof), epoch)
			b.Epoch = &epoch
		}
	}
	res := policy.Resources{LinkBytesPerSec: b.LinkBytesPerSec, StorageCores: b.StorageCores, ComputeCores: b.ComputeCores,
		GPUSamplesPerSec: b.GPUSamplesPerSec, StorageSpeed: b.StorageSpeed, CacheBytes: float64(x.res.CacheBytes)}
	br, err := policy.Bound(policy.OneNode(prof, res))
	if err != nil {
		b.Error = fmt.Sprintf("bound: %v", err)
		return b
	}
	b.Seconds = br.Seconds
	for _, r := range br.Binding {
		b.Binding = append(b.Binding, r.Resource.String())
	}
	x.cfg.Log.Info().Str("rate", c.Rate).Float64("storage_cpus", c.StorageCPUs).Float64("bound_seconds", b.Seconds).
		Strs("binding", b.Binding).Msg("cell bound")
	return b
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
func (x *experiment) cutAreas() *profiler.CutAreas {
	pipe, err := ops.Preset(x.pipe)
	if err != nil || !pipe.CanCut() {
		return nil
	}
	d, err := dataset.Open(x.res.Dataset.Path)
	if err != nil {
		x.cfg.Log.Warn().Err(err).Msg("cell bound: no headers, cuts at their mean boxes")
		return nil
	}
	ims := make([]profiler.CutImage, d.Len())
	for id := range ims {
		h := d.Header(uint64(id))
		mw, mh := h.MCU()
		ims[id] = profiler.CutImageOf(h.Width(), h.Height(), mw, mh, h.Components())
	}
	if err := d.Close(); err != nil {
		x.cfg.Log.Warn().Err(err).Msg("cell bound: closing the dataset")
	}
	return &profiler.CutAreas{Pipe: pipe, Seed: x.cfg.Seed, Image: func(id uint64) (profiler.CutImage, bool) {
		if id >= uint64(len(ims)) || ims[id].W <= 0 {
			return profiler.CutImage{}, false
		}
		return ims[id], true
	}}
}

// cellComputeCores is the compute cores the compute agent's model plans
// cell c with: its finishing workers (computeCores) within the compute
// node's CPU quota (c.ComputeCPUs; none on loopback), as the agent itself
// takes them (internal/cpuquota).
func cellComputeCores(c *results.Cell, flags []string) float64 {
	cores := computeCores(flags)
	if c.ComputeCPUs > 0 {
		cores = min(cores, c.ComputeCPUs)
	}
	return cores
}
