package profiler

// ProfileVersion is the version of the profile file format this package
// writes and reads.
const ProfileVersion = 1

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
	// Samples holds one entry per sample, in id order.
	Samples []SampleProfile `json:"samples"`
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
}

// N is the number of ops.
func (p *Profile) N() int { return len(p.Ops) }
