// Package results is the schema of a testbed experiment's results.json and
// the report made from it: a markdown report and SVG charts. `testbed run`
// fills a Results and calls Write; tests and users read it back with Load.
package results

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/tensors"
)

// Version is the results.json schema version; Load refuses others.
const Version = 1

// Modes of an experiment (Results.Mode).
const (
	// ModeNetns: two network namespaces joined by a veth pair shaped with
	// tc tbf, the storage agent under a cgroup CPU quota (needs root).
	ModeNetns = "netns"
	// ModeLoopback: both agents on loopback behind an in-process token
	// bucket (shape.Proxy); the storage agent's CPU is limited by its own
	// --cpus budget only. Used without root.
	ModeLoopback = "loopback"
)

// PeerPolicy is the Run.Policy of the peer row: PyTorch's DataLoader with
// torchvision transforms reading raw files over HTTP through the same link.
const PeerPolicy = "peer-torchvision"

// TrainerPolicy is the Run.Policy of the trainer row: a small CNN trained
// through the Python client (python/sophon's Loader) from the compute
// agent's trainer socket, the agent fetching over the same link; Run.Plan
// names the agent's plan or policy.
const TrainerPolicy = "sophon-client"

// FirstLossSteps is how many of a training row's first steps keep their
// loss (Run.FirstLosses).
const FirstLossSteps = 10

// FrameOverhead is the bytes of headers the veth counts per received
// packet: Ethernet (14), IPv4 (20) and TCP with the timestamp option (32).
// A GSO packet, however large, is counted once with one set of headers, so
// bytes - packets x FrameOverhead is the TCP payload however the kernel
// batched it.
const FrameOverhead = 14 + 20 + 32

// Results is one experiment: a grid of cells (link rate x storage CPUs),
// each running every policy for a number of epochs.
type Results struct {
	Version  int       `json:"version"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
	// Mode is ModeNetns or ModeLoopback; ModeNote says why and what it
	// means for the figures (e.g. "not root: loopback with an in-process
	// token bucket").
	Mode     string `json:"mode"`
	ModeNote string `json:"mode_note,omitempty"`
	// CongestionControl is `--cc`: the TCP congestion control set in
	// every node's namespace. Empty: the host's default (each cell's
	// congestion_control says which that was).
	CongestionControl string  `json:"congestion_control,omitempty"`
	Dataset           Dataset `json:"dataset"`
	// Pipeline is the pipeline's id (ops.Pipeline.ID) and preset or spec
	// file name.
	Pipeline string `json:"pipeline"`
	// Pipelines is `--pipeline` with several: every policy ran once per
	// pipeline in each cell (Run.Pipeline), Pipeline being the first.
	// Absent: one pipeline.
	Pipelines []string `json:"pipelines,omitempty"`
	// Fidelity is, for each of Pipelines with encode_jpeg, its delivered
	// tensors against the first lossless pipeline's for the same keys.
	// Absent: no lossy pipeline beside a lossless one.
	Fidelity []tensors.Fidelity `json:"fidelity,omitempty"`
	// GPU is the compute agent's --gpu consumer (e.g. "sim:800").
	GPU    string `json:"gpu"`
	Epochs int    `json:"epochs"`
	Seed   uint64 `json:"seed"`
	// Scale states how the emulation maps to the hardware it stands for
	// (e.g. "link scaled down 20x: 1 storage core plays the paper's 20").
	Scale string `json:"scale,omitempty"`
	// Repeat is `testbed run --repeat`: each cell of the grid ran this
	// many times, one after the other, with fresh agents (Cell.Repetition
	// numbers them). 0 or 1: once.
	Repeat int `json:"repeat,omitempty"`
	// WorkConserving is `--work-conserving`: "on" (the compute agent's
	// default), "off" (every compute agent ran with
	// --work-conserving=false) or "both" (each policy but nooff ran both
	// ways, the second as "<policy>-nowc"). Empty in older files: "on".
	WorkConserving string `json:"work_conserving,omitempty"`
	// CacheBytes is `--cache-bytes` resolved: every compute agent ran with
	// a fresh cache of this budget per run. 0: no cache.
	CacheBytes int64 `json:"cache_bytes,omitempty"`
	// ContendAt is `--contend-at`: in each policy run a CPU hog started in
	// the storage agent's cgroup once floor(ContendAt x Epochs) epochs were
	// done (Run.Contention); ContendThreads its busy threads. 0: none.
	ContendAt      float64 `json:"contend_at,omitempty"`
	ContendThreads int     `json:"contend_threads,omitempty"`
	// RateSchedule is `--rate-schedule` (shape.Schedule's text): in each
	// policy run, every epoch after the first had its link's rate changed
	// at these offsets from its start (Run.RateChanges). Absent: none.
	RateSchedule string `json:"rate_schedule,omitempty"`
	// StorageNodes and ComputeNodes are `--storage-nodes` and
	// `--compute-nodes` when either is above 1: every cell ran that many
	// storage agents and compute agents (ranks of one world) in a star of
	// namespaces (or on loopback). Absent: one of each, the two-node link.
	StorageNodes int `json:"storage_nodes,omitempty"`
	ComputeNodes int `json:"compute_nodes,omitempty"`
	// Jobs is `--jobs` when above 1: the compute agents ran as that many
	// independent training jobs (compute-agent --job job<i>, each over the
	// whole dataset) sharing the storage agents, not as ranks of one; an
	// epoch's RankSeconds are then each job's, and Job* each job's own.
	Jobs int `json:"jobs,omitempty"`
	// JobLinks is `--job-links`: each job had a link of its own at the
	// cell's rate (its compute node's, shaped) and the storage link ran at
	// their sum.
	JobLinks bool `json:"job_links,omitempty"`
	// Placements is `--placements`: each policy ran once per placement,
	// every compute agent with --placement P (Run.Placement). Absent: no
	// --placement was passed (the compute agent's default).
	Placements []string `json:"placements,omitempty"`
	// Reference is `--reference`: the --samples-out file of a 1 x 1 run
	// whose tensors every run's were compared with (Run.ContentMatches).
	// Absent: the experiment's first exactly-once run was the reference.
	Reference string `json:"reference,omitempty"`
	// Cells are the grid's points, rates outermost, then storage CPUs,
	// then repetitions.
	Cells []Cell `json:"cells"`
	// Repeatability is, with Repeat > 1, each policy's steady-state epoch
	// over the repetitions of each grid point (see Repeatabilities).
	Repeatability []Repeatability `json:"repeatability,omitempty"`
}

// Machine names the host the experiment ran on.
type Machine struct {
	Hostname  string `json:"hostname"`
	CPUModel  string `json:"cpu_model"`
	Cores     int    `json:"cores"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	// Pinning says which cores each agent was pinned to ("" when not).
	Pinning string `json:"pinning,omitempty"`
}

// Dataset describes the data the agents served.
type Dataset struct {
	Path    string `json:"path"`
	Kind    string `json:"kind,omitempty"` // generator kind, "" for a user's folder
	Seed    uint64 `json:"seed,omitempty"`
	Samples int    `json:"samples"`
	// Classes is the number of class folders (ImageFolder); 0 for tar
	// shards.
	Classes     int     `json:"classes,omitempty"`
	Bytes       int64   `json:"bytes"`
	MeanBytes   float64 `json:"mean_bytes"`
	Fingerprint string  `json:"fingerprint,omitempty"`
	// Source is where the storage agents read the dataset when not from
	// Path itself: "s3://BUCKET/PREFIX", an S3 bucket (versitygw's POSIX
	// gateway over Path's parent, on each storage node). Empty: the folder.
	Source string `json:"source,omitempty"`
}

// Cell is one point of the grid.
type Cell struct {
	// Rate is the link rate as given ("500mbit"); RateBitsPerSec parsed.
	Rate           string  `json:"rate"`
	RateBitsPerSec float64 `json:"rate_bits_per_sec"`
	// StorageCPUs is the storage agent's CPU limit in cores.
	StorageCPUs float64 `json:"storage_cpus"`
	// Repetition numbers the cell's repetitions from 1 with --repeat N >
	// 1; 0 when the grid ran once.
	Repetition int `json:"repetition,omitempty"`
	// StorageRates is each storage link's rate, in storage node order,
	// when there are several storage or compute nodes (then Rate is the
	// rates joined with "+" and RateBitsPerSec their sum). Absent: 1 x 1.
	StorageRates []string `json:"storage_rates,omitempty"`
	// DelayLine is set when the cell's link went through the testbed's
	// user-space delay line (testbed run --rtt, --jitter, --loss; every
	// cell of such a run, RTT 0 included); RTTMs, JitterMs and Loss are
	// then its round trip and jitter in milliseconds and its loss
	// fraction in each direction. All zero: the veth pair.
	DelayLine bool    `json:"delay_line,omitempty"`
	RTTMs     float64 `json:"rtt_ms"`
	JitterMs  float64 `json:"jitter_ms"`
	Loss      float64 `json:"loss"`
	// CongestionControl is the TCP congestion control the nodes'
	// namespaces ran with (--cc, or the host's default); empty on
	// loopback and in files from before it.
	CongestionControl string `json:"congestion_control,omitempty"`
	// LinkPayloadFraction is the share of the shaped rate that TCP's
	// payload can have (netns.PayloadFraction): tbf charges every
	// segment's headers, 1448/1514 of the rate at MTU 1500 on the veth
	// pair, (MTU-52)/MTU on the delay line; 1 on loopback, whose proxies
	// shape the payload itself. Zero in files from before it: 1.
	LinkPayloadFraction float64 `json:"link_payload_fraction,omitempty"`
	// Bound is the cell's one lower bound, the same for every run: the
	// tables' and charts' bound (CellBound). Nil in files from before it,
	// and with several compute nodes (each plans its own shard).
	Bound *CellBound `json:"bound,omitempty"`
	// PipelineBounds is, with several pipelines (Results.Pipelines), each
	// one's bound over its own profile, in order (CellBound.Pipeline names
	// it); Bound is then the first's. Absent: one pipeline.
	PipelineBounds []*CellBound `json:"pipeline_bounds,omitempty"`
	// ComputeCPUs is the compute nodes' CPU quota in cores, which the
	// compute agents (and the peer) ran under and planned with: the
	// machine's cores less the storage nodes' quotas (bed.ComputeCPUs).
	// Zero: no cgroups (loopback), the compute side unlimited.
	ComputeCPUs float64 `json:"compute_cpus,omitempty"`
	// ComputeCPUsEach is, with Jobs, each job's compute node's own quota:
	// its equal part of ComputeCPUs, in a cgroup of its own, which its
	// compute agent planned with (bed.Config.ComputeApart). Zero: the
	// compute agents shared ComputeCPUs.
	ComputeCPUsEach float64 `json:"compute_cpus_each,omitempty"`
	// TestbedCPUSeconds is the CPU time the testbed process itself used
	// over the cell (its counters and watchers; on loopback its shaping
	// proxies), outside every node's quota; Seconds is the cell's wall
	// time.
	TestbedCPUSeconds float64 `json:"testbed_cpu_seconds,omitempty"`
	Seconds           float64 `json:"seconds,omitempty"`
	Runs              []Run   `json:"runs"`
}

// Link names the cell's link for people: its rate, and on the delay line
// its round trip ("100mbit, rtt 20ms"), and the jitter and loss when set.
func (c *Cell) Link() string {
	if !c.DelayLine {
		return c.Rate
	}
	s := fmt.Sprintf("%s, rtt %sms", c.Rate, strconv.FormatFloat(c.RTTMs, 'f', -1, 64))
	if c.JitterMs > 0 {
		s += fmt.Sprintf(", jitter %sms", strconv.FormatFloat(c.JitterMs, 'f', -1, 64))
	}
	if c.Loss > 0 {
		s += fmt.Sprintf(", loss %s%%", strconv.FormatFloat(100*c.Loss, 'g', 4, 64))
	}
	return s
}

// Run is one policy (or the peer, or the trainer) in one cell.
type Run struct {
	Policy string `json:"policy"`
	// Pipeline is the run's pipeline when the experiment ran several
	// (Results.Pipelines); absent with one (Results.Pipeline). The peer
	// row runs the first and leaves it empty; each pipeline has a trainer
	// row of its own, which names it.
	Pipeline string `json:"pipeline,omitempty"`
	// Plan is the compute agent's plan or policy where Policy does not say
	// it: the trainer row's ("nooff", "sophon"...).
	Plan string `json:"plan,omitempty"`
	// Skipped, when set, says why the run did not happen (e.g. the peer
	// without torchvision); Error, when set, why it failed.
	Skipped string  `json:"skipped,omitempty"`
	Error   string  `json:"error,omitempty"`
	Epochs  []Epoch `json:"epochs"`
	// ExactlyOnce is true when every epoch delivered every sample of the
	// dataset exactly once (Epoch.Samples == Dataset.Samples, no
	// duplicates, no failures); ContentMatches is true when each sample's
	// tensor hash equals the reference run's (the first policy's) for the
	// same epoch, i.e. placement did not change the data.
	ExactlyOnce    bool `json:"exactly_once"`
	ContentMatches bool `json:"content_matches"`
	// WorkConservingOff is true when the compute agent ran with
	// --work-conserving=false (`--work-conserving off`, or the "-nowc"
	// runs of `both`).
	WorkConservingOff bool `json:"work_conserving_off,omitempty"`
	// WholeBudget is true for a "-whole" run of several jobs: every job
	// planned for the storage agents' whole budgets (compute-agent
	// --whole-budget), as before shares, not for its share.
	WholeBudget bool `json:"whole_budget,omitempty"`
	// Contention is the CPU hog of `--contend-at` in this run; nil when
	// none ran.
	Contention *Contention `json:"contention,omitempty"`
	// RateChanges are the link's rate changes the rate schedule made in
	// this run (Results.RateSchedule), in order; absent without one.
	RateChanges []RateChange `json:"rate_changes,omitempty"`
	// NoResplit is true when the compute agent ran with --resplit=false
	// (a "<policy>-noresplit" row).
	NoResplit bool `json:"no_resplit,omitempty"`
	// Placement is the compute agents' --placement (with --placements);
	// absent when none was passed.
	Placement string `json:"placement,omitempty"`

	// Training is true for the rows that fed a real training loop instead
	// of the simulated GPU (the trainer row, and the peer with `testbed run
	// --train`): their epochs include the model's steps, so their epoch
	// times compare with each other, not with the simulated GPU's rows.
	// The Loop fields and FirstLosses are what reached that loop over the
	// whole run (every epoch), as the training script measured it:
	// LoopImages images in LoopSteps steps over LoopSeconds, the loop's
	// wall time from just before it asked for its first batch to its end
	// (train_cnn.py: its loader closed; the peer: its epochs' sum), the
	// loader's start-up included (connecting, a policy's stage 1, the
	// DataLoader's workers); LoopImagesPerSec is LoopImages / LoopSeconds,
	// the whole run's rate (the steady state is the last epoch's
	// samples/s); LoopWaitSeconds the
	// part of LoopSeconds the loop spent blocked on its loader (the GPU's
	// idle time); FirstLosses the losses of the run's first
	// FirstLossSteps steps, in order.
	Training         bool      `json:"training,omitempty"`
	LoopImages       int       `json:"loop_images,omitempty"`
	LoopSteps        int       `json:"loop_steps,omitempty"`
	LoopSeconds      float64   `json:"loop_seconds,omitempty"`
	LoopImagesPerSec float64   `json:"loop_images_per_sec,omitempty"`
	LoopWaitSeconds  float64   `json:"loop_wait_seconds,omitempty"`
	FirstLosses      []float64 `json:"first_losses,omitempty"`
}

// Epoch is one epoch of a run.
type Epoch struct {
	Epoch            int     `json:"epoch"`
	Seconds          float64 `json:"seconds"`
	PredictedSeconds float64 `json:"predicted_seconds,omitempty"`
	// Prediction is the agent's plan's prediction per resource and the
	// resources it assumed (the report's "prediction"), for the
	// per-resource account (AccountOf); nil for an epoch without a plan,
	// and with several compute nodes.
	Prediction *Prediction `json:"prediction,omitempty"`
	// AgentBoundSeconds is the compute agent's own bound for the run
	// (its report's bound_seconds): over the resources its stage 1
	// measured and its own profile, so it differs from run to run. The
	// agent's view only; the tables show the cell's (Cell.Bound). Files
	// from before the cell bound name it bound_seconds.
	AgentBoundSeconds float64 `json:"agent_bound_seconds,omitempty"`
	Samples           int     `json:"samples"`
	Duplicates        int     `json:"duplicates"`
	Failed            int     `json:"failed"`
	// AgentBytes is the payload the compute agent received (its report's
	// bytes_received; the peer's file bytes). KernelBytes and
	// KernelPackets are what the compute side's veth received over the
	// epoch, frames and headers included; KernelPayloadBytes is
	// KernelBytes less FrameOverhead per packet: the TCP payload, which
	// the agents' counters should match to within their framing (gRPC,
	// HTTP). All three are 0 in loopback mode, where ProxyBytes counts what
	// the shaping proxy relayed.
	AgentBytes         int64 `json:"agent_bytes"`
	KernelBytes        int64 `json:"kernel_bytes,omitempty"`
	KernelPackets      int64 `json:"kernel_packets,omitempty"`
	KernelPayloadBytes int64 `json:"kernel_payload_bytes,omitempty"`
	// KernelBlurBytes bounds how far KernelBytes can be off: the bytes
	// received between the counter samples around each end of the
	// epoch's window, which are interpolated (a few ms of traffic, more
	// when a loaded machine starves the sampler).
	KernelBlurBytes int64 `json:"kernel_blur_bytes,omitempty"`
	ProxyBytes      int64 `json:"proxy_bytes,omitempty"`
	// StorageCPUSeconds is the storage agent's CPU over the epoch as its
	// responses reported; ComputeCPUSeconds the compute agent's finishing
	// workers'.
	StorageCPUSeconds float64 `json:"storage_cpu_seconds"`
	ComputeCPUSeconds float64 `json:"compute_cpu_seconds"`
	// ComputeProcessCPUSeconds is the compute agents' process CPU over the
	// epoch, every thread (their reports' process_cpu_seconds, summed):
	// beyond ComputeCPUSeconds, receiving, the engine, the hand-off and
	// the garbage collector; 0 where not reported.
	ComputeProcessCPUSeconds float64 `json:"compute_process_cpu_seconds,omitempty"`
	// StorageNSPerByte is the storage agents' CPU per byte sent beyond
	// their ops (gRPC, TLS) that the compute agent measured over the epoch
	// (its report's storage_ns_per_byte); 0 when not measured.
	StorageNSPerByte float64 `json:"storage_ns_per_byte,omitempty"`
	GPUIdleFraction  float64 `json:"gpu_idle_fraction"`
	Profiled         bool    `json:"profiled,omitempty"`
	Replanned        bool    `json:"replanned,omitempty"`

	// With several storage or compute nodes (absent otherwise): Seconds
	// is the slowest rank's epoch (data-parallel training waits for it)
	// and RankSeconds each rank's, in rank order; the counts, bytes and
	// CPU above are the ranks' sums (GPUIdleFraction their mean,
	// PredictedSeconds and AgentBoundSeconds the largest rank's), and the
	// kernel bytes the compute nodes' together, from the first rank's
	// start to the last rank's end. LinkBytes is what each storage node
	// sent on its link over that time, in storage node order (its veth
	// end's kernel counter; on loopback its shaping proxies' relayed
	// bytes); StorageAgentCPUSeconds each storage agent's CPU time (user
	// and system, from /proc, at 10 ms resolution), the gRPC and TLS work
	// included, unlike StorageCPUSeconds, which sums the ops' CPU the
	// responses reported.
	RankSeconds []float64 `json:"rank_seconds,omitempty"`
	// With Jobs, each job's bound for the storage share it planned for,
	// its predicted epoch and that share (its report's bound_seconds,
	// predicted_seconds and share_cpus), in job order.
	JobBoundSeconds        []float64 `json:"job_bound_seconds,omitempty"`
	JobPredictedSeconds    []float64 `json:"job_predicted_seconds,omitempty"`
	JobShareCPUs           []float64 `json:"job_share_cpus,omitempty"`
	LinkBytes              []int64   `json:"link_bytes,omitempty"`
	StorageAgentCPUSeconds []float64 `json:"storage_agent_cpu_seconds,omitempty"`
	// Cache is the compute agents' cache over the epoch (their reports'
	// cache, summed over the ranks); nil without one.
	Cache *CacheEpoch `json:"cache,omitempty"`
	// The link as the compute agents read it over the epoch (their
	// reports' link; omitted when unread): RTTSeconds the mean round trip
	// (the largest rank's), InFlightMeanBytes and InFlightPeakBytes the
	// TCP bytes the storage agents had in flight, Retransmits their
	// segments sent again, WindowCount the fetch windows' requests at the
	// epoch's end (all summed over the ranks).
	RTTSeconds        float64 `json:"rtt_seconds,omitempty"`
	InFlightMeanBytes int64   `json:"in_flight_mean_bytes,omitempty"`
	InFlightPeakBytes int64   `json:"in_flight_peak_bytes,omitempty"`
	Retransmits       uint64  `json:"retransmits,omitempty"`
	WindowCount       int     `json:"window_count,omitempty"`
	// StreamFailures is the Fetch streams that failed in the epoch (the
	// reports' stream_failures, summed over the ranks): the responses in
	// flight on one crossed the link, in part or whole, and reached no
	// sample, so the agents' bytes fall short of the kernel's by them.
	StreamFailures int `json:"stream_failures,omitempty"`
	// Resplits are the compute agent's re-splits within the epoch (its
	// report's "resplits"), with one compute node; absent when none.
	Resplits []report.Resplit `json:"resplits,omitempty"`
	// Shed is the offloads the compute agents requested raw because the
	// storage side would have finished after the link (their reports'
	// shed), and Contended those the storage agents answered raw because
	// their CPU could not finish them in time (served_raw.contended), both
	// summed over the ranks: work-conserving offload's departures from
	// the plan, which Prediction.Shed predicts in part (the plan's own
	// shed cut; docs/policy.md, "The plan as the shedder runs it").
	Shed      int `json:"shed,omitempty"`
	Contended int `json:"contended,omitempty"`
}

// UnmarshalJSON reads an epoch, taking bound_seconds, the agent's bound
// as files from before the cell bound name it, as AgentBoundSeconds.
func (e *Epoch) UnmarshalJSON(b []byte) error {
	type plain Epoch // without this method
	var v struct {
		plain
		Old float64 `json:"bound_seconds"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Epoch(v.plain)
	if e.AgentBoundSeconds == 0 {
		e.AgentBoundSeconds = v.Old
	}
	return nil
}

// CacheEpoch is an epoch's account of the compute nodes' caches (see
// compute-agent/report.CacheStats): hits read locally, misses fetched and
// filled, bad entries refilled, the entry bytes read, and what was
// resident at the epoch's end.
type CacheEpoch struct {
	Hits            int   `json:"hits"`
	Misses          int   `json:"misses"`
	Refills         int   `json:"refills"`
	ReadBytes       int64 `json:"read_bytes"`
	ResidentSamples int   `json:"resident_samples"`
	ResidentBytes   int64 `json:"resident_bytes"`
}

// SamplesPerSec is the epoch's throughput.
func (e Epoch) SamplesPerSec() float64 {
	if e.Seconds <= 0 {
		return 0
	}
	return float64(e.Samples) / e.Seconds
}

// Steady is the run's steady-state epoch: the last one, or nil.
func (r Run) Steady() *Epoch {
	if len(r.Epochs) == 0 {
		return nil
	}
	return &r.Epochs[len(r.Epochs)-1]
}

// Write stores r as dir/results.json.
func Write(dir string, r *Results) (string, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "results.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// Load reads a results.json.
func Load(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("results %s: %w", path, err)
	}
	if r.Version != Version {
		return nil, fmt.Errorf("results %s: version %d, want %d", path, r.Version, Version)
	}
	return &r, nil
}

// PayloadBytesPerSec is the payload bytes a second the cell's link can
// carry: the shaped rate less every segment's headers
// (LinkPayloadFraction).
func (c *Cell) PayloadBytesPerSec() float64 {
	f := c.LinkPayloadFraction
	if f <= 0 || f > 1 {
		f = 1
	}
	return c.RateBitsPerSec / 8 * f
}
