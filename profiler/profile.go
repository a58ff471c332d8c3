package profiler

import "math"

// ProfileVersion is the version of the profile file format this package
// writes and reads.
//
// Version 2 added the JPEG-domain crop split's measurements (CutBytes,
// CutNS, CutFinishNS) and the measured resources (Profile.Resources). A
// version 1 file is refused with ErrProfileVersion like any other, which
// the compute agent treats as no saved profile: stage 2 records a new one
// and saves it, as version 2, over the old. Reading version 1 as version 2
// without cut data would be possible, but its plans would never cut.
const ProfileVersion = 2

// Profile is stage 2's output: for every sample of a dataset and every
// split point k of a pipeline, what crossing the link costs in bytes and
// what the ops on each side cost in CPU time. The policies (package policy)
// plan from it. It is keyed by the dataset's fingerprint and the pipeline's
// ID, so a later run reuses it only for the same data and ops.
type Profile struct {
	Version     int    `json:"version"`
	Fingerprint string `json:"fingerprint"`
	// Pipeline is ops.Pipeline.ID().
	Pipeline string `json:"pipeline"`
	// Ops names the pipeline's ops; split k runs Ops[0:k] on storage.
	Ops []string `json:"ops"`
	// CropSplit is the split just after the pipeline's first crop op
	// (ops.Pipeline.CropSplit: ResizeOff's split), 0 when it has none or
	// the profile predates the field.
	CropSplit int `json:"crop_split,omitempty"`
	// Samples holds one entry per sample, in id order.
	Samples []SampleProfile `json:"samples"`
	// Resources, when set, is the running mean of the resources measured
	// while the profile was recorded and in the epochs since, so that a
	// re-plan starts from estimates that do not wobble with one epoch's
	// noise. Nil means none was recorded.
	Resources *MeasuredResources `json:"resources,omitempty"`
}

// SampleProfile is one sample's sizes and costs. With n ops, Bytes and
// Compressed have n+1 entries (index k: what crosses the link at split k,
// payload bytes of the wire form, k = 0 being the raw file) and OpNS has n
// (the CPU time of op j on this sample, measured on the compute node).
type SampleProfile struct {
	ID    uint64  `json:"id"`
	Raw   int64   `json:"raw"`
	Bytes []int64 `json:"bytes"`
	// Compressed is Bytes under zstd (equal to Bytes where it does not
	// help); CompressNS and DecompressNS are the CPU time it costs at each
	// split, on the storage and the compute side respectively.
	Compressed   []int64 `json:"compressed,omitempty"`
	CompressNS   []int64 `json:"compress_ns,omitempty"`
	DecompressNS []int64 `json:"decompress_ns,omitempty"`
	OpNS         []int64 `json:"op_ns"`
	// The JPEG-domain crop split (ops.SplitCut), for pipelines that start
	// with decode and random_resized_crop: the storage side cuts the JPEG
	// to the crop box without decoding it, the compute side decodes the box
	// from the cut and resamples it (replacing ops 0 and 1), then runs ops
	// [2:n]. CutBytes is the cut's payload (ops.CutJPEG.Size()); zero means
	// the sample has no cut (the pipeline cannot cut, or this file could
	// not be cut exactly), and then CutNS and CutFinishNS are zero too.
	// CutNS is the storage-side CPU time of the cut and CutFinishNS the
	// compute-side CPU time of finishing ops 0 and 1 from it, both measured
	// on the compute node like OpNS; the cut's compute side costs
	// CutFinishNS + OpNS[2] + ... + OpNS[n-1].
	CutBytes    int64 `json:"cut_bytes,omitempty"`
	CutNS       int64 `json:"cut_ns,omitempty"`
	CutFinishNS int64 `json:"cut_finish_ns,omitempty"`
}

// N is the number of ops.
func (p *Profile) N() int { return len(p.Ops) }

// HasCut reports whether the sample has the cut split's measurements.
func (s *SampleProfile) HasCut() bool { return s.CutBytes > 0 }

// MeasuredResources is what the compute agent measured of the hardware a
// plan runs on, in the units of policy.Resources (which it converts to
// field by field): a running mean over the profiling epoch and every epoch
// after it. A zero field was not measured.
type MeasuredResources struct {
	// LinkBytesPerSec is the payload bandwidth from all storage agents to
	// the compute node.
	LinkBytesPerSec float64 `json:"link_bytes_per_sec,omitempty"`
	// StorageSpeed is the storage CPU's speed relative to the clock the
	// profile's costs were measured on (the compute node's).
	StorageSpeed float64 `json:"storage_speed,omitempty"`
	// StorageCores and ComputeCores are the cores available to
	// preprocessing on storage (summed over the agents) and on the compute
	// node.
	StorageCores float64 `json:"storage_cores,omitempty"`
	ComputeCores float64 `json:"compute_cores,omitempty"`
	// GPUSamplesPerSec is the rate at which training consumes samples.
	GPUSamplesPerSec float64 `json:"gpu_samples_per_sec,omitempty"`
	// Epochs is the weight, in epochs, of the measurements averaged (a
	// fraction for a partial epoch).
	Epochs float64 `json:"epochs,omitempty"`
	// NoOffSeconds is the last measured No-Off epoch's time, not a mean:
	// the measured guard re-plans after an epoch slower than it.
	NoOffSeconds float64 `json:"nooff_seconds,omitempty"`
}

// Update folds one observation into the running mean: each field becomes
// (m.X*m.Epochs + obs.X*weight) / (m.Epochs + weight), and Epochs grows by
// weight, so after epochs e1, e2, ... of weight 1 each field is their plain
// mean. weight is how many epochs obs stands for (1 for a whole epoch's
// report; less for a partial one); obs.Epochs is ignored, and
// obs.NoOffSeconds, when measured, replaces m's (the last one counts). A field of obs
// that is zero, negative or not finite was not measured and leaves m's
// field as it is; a field of m that is zero (never measured) takes obs's
// value outright, as does every field when m.Epochs is zero (m holds no
// measurement yet). A weight that is not positive and finite changes
// nothing.
//
// NB: one Epochs counts for every field, so a field measured in only some
// epochs weighs its later observations a little less than a mean of its
// own would; it stays a weighted mean of what was observed.
func (m *MeasuredResources) Update(obs MeasuredResources, weight float64) {
	if !measured(weight) {
		return
	}
	old := m.Epochs
	if !measured(old) {
		old = 0
	}
	for _, f := range []struct {
		dst *float64
		x   float64
	}{
		{&m.LinkBytesPerSec, obs.LinkBytesPerSec},
		{&m.StorageSpeed, obs.StorageSpeed},
		{&m.StorageCores, obs.StorageCores},
		{&m.ComputeCores, obs.ComputeCores},
		{&m.GPUSamplesPerSec, obs.GPUSamplesPerSec},
	} {
		switch {
		case !measured(f.x):
		case !measured(*f.dst) || old == 0:
			*f.dst = f.x
		default:
			*f.dst = (*f.dst*old + f.x*weight) / (old + weight)
		}
	}
	m.Epochs = old + weight
	if measured(obs.NoOffSeconds) {
		m.NoOffSeconds = obs.NoOffSeconds
	}
}

// measured reports whether x is positive and finite.
func measured(x float64) bool { return x > 0 && !math.IsInf(x, 1) }
