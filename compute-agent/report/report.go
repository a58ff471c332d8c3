// Package report is the compute agent's per-epoch account: EpochReport and
// the types it holds, written as one JSON line per epoch (Append) and read
// back (ReadReport). The JSON field names are a contract with the testbed
// and the docs; each field's comment says what it counts.
package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/sophon-dl/sophon/policy/hardware"
)

// EpochReport is one epoch's account, written as one JSON line per epoch
// to the agent's report file (Config.ReportPath) and returned by the
// agent's Run. When Status is not "ok" the counters cover the part of the
// epoch that ran. The fields from Policy on are set by a policy run
// (Config.Policy) only.
type EpochReport struct {
	// Epoch is the epoch number.
	Epoch uint64 `json:"epoch"`
	// Seconds is the wall time from the first request to the last batch
	// consumed. It leaves out StartWaitSeconds: the epoch's whole wall
	// time is Seconds + StartWaitSeconds.
	Seconds float64 `json:"seconds"`
	// StartWaitSeconds is the wall time from the epoch's beginning to its
	// first request (StartUnixNS): finding the storage agents, waiting out
	// unreachable ones (retried with back-off within --retry-budget),
	// reading the catalog on first use and preparing the shard. Near 0
	// when every storage agent answers at once; for an epoch that failed
	// before its first request (no storage agent within the budget), all
	// of its time. In trainer mode the epoch begins when the last local
	// rank asked for it, so this also counts a wait for the agent's
	// stage 1 where a rank asked during it.
	StartWaitSeconds float64 `json:"start_wait_seconds"`
	// FirstBatchSeconds is the wall time from the epoch's beginning to its
	// first batch: StartWaitSeconds and then until the consumer took it,
	// or in trainer mode until a rank's first batch was ready in its
	// slots. In trainer mode the epoch begins when the last local rank
	// asked for it, which may be before the agent was ready to start it
	// (its policy's stage 1 still running). 0 when none was.
	FirstBatchSeconds float64 `json:"first_batch_seconds,omitempty"`
	// StartUnixNS is when the epoch began (Unix ns, the agent's clock), to
	// match the epoch with outside counters (e.g. a NIC's bytes).
	StartUnixNS int64 `json:"start_unix_ns"`
	// EndUnixNS is when the epoch ended (Unix ns, the agent's clock).
	EndUnixNS int64 `json:"end_unix_ns"`
	// LinkFirstSeconds and LinkLastSeconds are when the epoch's first and
	// last response arrived over the link, counted from its first request:
	// the link's ramp before the first and the epoch's drain after the
	// last are what keeps an epoch above its bound when the link binds.
	// 0 when no response came over the link.
	LinkFirstSeconds float64 `json:"link_first_seconds,omitempty"`
	LinkLastSeconds  float64 `json:"link_last_seconds,omitempty"`
	// Pipeline is the pipeline's ops.Pipeline.ID().
	Pipeline string `json:"pipeline"`
	// Plan is the plan's name: nooff, alloff, resizeoff or a plan file.
	Plan string `json:"plan"`
	// StrictOrder is true when batches formed in the epoch's permutation
	// order, false when they formed in completion order.
	StrictOrder bool `json:"strict_order"`
	// FetchOnly marks a link test: samples were validated, not finished or
	// consumed (omitted when false).
	FetchOnly bool `json:"fetch_only,omitempty"`
	// Storage names the storage agents the epoch used.
	Storage []string `json:"storage"`
	// ByStorage is what each storage agent of Storage served, in the
	// same order: samples accepted and their wire bytes.
	ByStorage []StorageStats `json:"by_storage,omitempty"`
	// Link is the round trip, loss and bytes in flight the epoch saw on
	// the link to its storage agents, and the windows it fetched with
	// (omitted when nothing was read: no storage agent answered).
	Link *Link `json:"link,omitempty"`
	// StorageNSPerByte is the storage agents' CPU per byte sent beyond
	// their ops (reads, gRPC, TLS), measured over the epoch from their
	// process CPU; 0 when not measured.
	StorageNSPerByte float64 `json:"storage_ns_per_byte,omitempty"`
	// Shard is the number of samples in this agent's shard (its rank of
	// the world); with Resumed, only the samples still to deliver in this
	// life of the agent (EpochShard is the whole epoch's).
	Shard int `json:"shard"`
	// Samples is the number of samples delivered to the consumer by this
	// life of the agent (EpochSamples counts the whole epoch's, across a
	// restart).
	Samples int `json:"samples"`
	// Batches is the number of batches delivered to the consumer.
	Batches int `json:"batches"`
	// SamplesFailed is len(Failed).
	SamplesFailed int `json:"samples_failed"`
	// Failed lists the epoch's bad samples.
	Failed []SampleFailure `json:"failed"`
	// BytesReceived is the wire bytes received (FetchResponse.data),
	// failed samples included.
	BytesReceived int64 `json:"bytes_received"`
	// LinkPeakBytesPerSec is the highest rate the epoch's bytes arrived
	// at over a second (stage1.LinkMeter.Peak): about a floor on
	// the link's capacity, which a storage-bound epoch does not hide; 0
	// where a planned epoch did not meter it.
	LinkPeakBytesPerSec float64 `json:"link_peak_bytes_per_sec,omitempty"`
	// BySplit is the delivered samples and their wire bytes per split
	// they arrived at (-1: the JPEG-domain crop; 0 includes offloads
	// answered raw).
	BySplit []SplitStats `json:"by_split"`
	// GPUIdleSeconds is the time the consumer waited for a batch; with
	// trainers, the mean of their WaitSeconds.
	GPUIdleSeconds float64 `json:"gpu_idle_seconds"`
	// GPUIdleFraction is GPUIdleSeconds / Seconds.
	GPUIdleFraction float64 `json:"gpu_idle_fraction"`
	// ComputeCPUSeconds is the thread CPU time of the finishing workers
	// (decoding the wire form, ops[k:n]).
	ComputeCPUSeconds float64 `json:"compute_cpu_seconds"`
	// ProcessCPUSeconds is the compute agent process's CPU over the
	// epoch, every thread: the finishing workers and what the per-op
	// profile does not see (receiving: gRPC, TLS, copies; the engine's
	// bookkeeping; the hand-off; the garbage collector). 0 where the
	// process clock cannot be read.
	ProcessCPUSeconds float64 `json:"process_cpu_seconds,omitempty"`
	// StorageCPUSeconds is the sum of FetchResponse.storage_cpu_ns over
	// the received samples.
	StorageCPUSeconds float64 `json:"storage_cpu_seconds"`
	// Retried counts requests re-issued after stream failures.
	Retried int `json:"retried"`
	// StreamFailures counts Fetch streams that failed.
	StreamFailures int `json:"stream_failures"`
	// Duplicates counts responses dropped as duplicates: the losing copy
	// of a hedged request (0 without stalls).
	Duplicates int `json:"duplicates"`
	// Stalls counts streams declared stalled (no response within the
	// stall timeout).
	Stalls int `json:"stalls"`
	// Hedged counts requests of stalled streams re-issued to other
	// storage agents.
	Hedged int `json:"hedged"`
	// Refetched counts the JPEG-domain cuts that did not finish here
	// (a file whose cut does not decode although the whole file does)
	// and were fetched again raw (omitted when none was).
	Refetched int `json:"refetched,omitempty"`
	// ServedRaw counts the offloads storage agents answered with the raw
	// bytes instead (omitted when none was).
	ServedRaw *ServedRaw `json:"served_raw,omitempty"`
	// Cache is the compute node's cache in this epoch (compute-agent
	// --cache-dir); omitted without one.
	Cache *CacheStats `json:"cache,omitempty"`
	// Shed counts the offloads this agent requested raw because the
	// storage side fell behind the plan (work-conserving offload),
	// omitted when none.
	Shed int `json:"shed,omitempty"`
	// Resumed counts the samples of this epoch delivered before a restart
	// (Config.StateDir; omitted when 0): Shard counts only the rest.
	Resumed int `json:"resumed,omitempty"`
	// EpochShard is the whole epoch's shard, over every life of the agent
	// (Shard + Resumed); it equals Shard without a restart.
	EpochShard int `json:"epoch_shard"`
	// EpochSamples is the whole epoch's delivered samples over every life
	// of the agent: the journaled samples of the lives before a restart
	// (Resumed) plus this life's (Samples); it equals Samples without a
	// restart. Bad samples of an earlier life are not journaled: they are
	// tried again in this one and count in SamplesFailed only if they
	// fail again, so EpochSamples + SamplesFailed = EpochShard for a
	// complete epoch.
	EpochSamples int `json:"epoch_samples"`
	// Padded counts the positions that repeat one of the rank's samples so
	// that every rank has the same count (as DistributedSampler pads),
	// omitted when none.
	Padded int `json:"padded,omitempty"`
	// Status is "ok", "failed" (Error says why) or "interrupted" (the
	// agent was stopped mid-epoch).
	Status string `json:"status"`
	// Error is why the epoch failed (omitted when ok).
	Error string `json:"error,omitempty"`
	// GPU is NVML's view of the node's GPUs during the epoch.
	GPU GPUStats `json:"gpu"`
	// Consumer is "trainer" when trainer processes took the batches
	// (Trainers says how each rank fared); omitted for the simulated GPU.
	Consumer string `json:"consumer,omitempty"`
	// Trainers is each local trainer rank's part of the epoch (omitted
	// without trainers).
	Trainers []TrainerStats `json:"trainers,omitempty"`

	// Policy is the policy of a policy run: nooff, alloff, resizeoff,
	// fastflow, sophon or optimal.
	Policy string `json:"policy,omitempty"`
	// PredictedSeconds is the predicted epoch time: the plan's
	// Prediction.Seconds, or stage 1's No-Off prediction for an epoch run
	// before a profile exists. For a first epoch whose plan took over
	// mid-epoch (PlanSwitchedAt), the plan's prediction of a whole epoch.
	PredictedSeconds float64 `json:"predicted_seconds,omitempty"`
	// Prediction is PredictedSeconds per resource, and the resources the
	// model assumed for it, so that a miss shows which resource the model
	// got wrong (omitted for an epoch without a plan: No-Off before a
	// profile exists).
	Prediction *Prediction `json:"prediction,omitempty"`
	// BoundSeconds is policy.Bound: the lower bound on any plan's epoch
	// time for the profile and resources (omitted while there is no
	// profile); for a plan made on Cluster, the cluster bound.
	BoundSeconds float64 `json:"bound_seconds,omitempty"`
	// CacheBoundSeconds, with a cache, is the bound that may also move the
	// residency (policy.BoundResult.CacheSeconds) for this epoch's crop boxes:
	// BoundSeconds is at the residency the run keeps across epochs, at
	// least this.
	CacheBoundSeconds float64 `json:"cache_bound_seconds,omitempty"`
	// Cluster is the cluster the epoch's plan was made on, when the agent
	// planned per storage agent (several of them, a policy with a cluster
	// form): the storage agents with their shares of the measured link
	// and cores, and this node. Written to a file, it is a cluster
	// description `policy explain --cluster` reads; each ByStorage entry's
	// Predicted is then what explain prints for that node.
	Cluster *hardware.Cluster `json:"cluster,omitempty"`
	// OffloadStorageCPUSeconds is StorageCPUSeconds of the samples fetched
	// at k > 0.
	OffloadStorageCPUSeconds float64 `json:"offload_storage_cpu_seconds,omitempty"`
	// OffloadStorageEffSeconds is the same samples' storage_budget_ns
	// times their agent's per-worker share of a core: their CPU time when
	// the agent got its whole budget, more when it did not (a cgroup quota
	// shared with the transport, a busy machine); 0 from agents that do
	// not report it.
	OffloadStorageEffSeconds float64 `json:"offload_storage_effective_cpu_seconds,omitempty"`
	// Profiled is true when stage 2 recorded this epoch's samples
	// (omitted when false).
	Profiled bool `json:"profiled,omitempty"`
	// Replanned is true when this epoch's measured link rate or storage
	// CPU drifted from the plan's assumptions past
	// Config.ReplanThreshold, or the epoch was slower than the last
	// measured No-Off epoch (the measured guard), so the next epoch runs a
	// new plan (omitted when false).
	Replanned bool `json:"replanned,omitempty"`
	// ReplanReason is why: "drift: ..." and/or "guard: ..." (omitted when
	// not replanned).
	ReplanReason string `json:"replan_reason,omitempty"`
	// Job is the job name this compute agent sent its storage agents
	// (compute-agent --job), under which they share their budgets.
	Job string `json:"job,omitempty"`
	// ShareCPUs is the storage cores this job was told were its own when
	// the epoch's plan was chosen, summed over the storage agents (each
	// one's InfoResponse.share_cpus); Jobs the most jobs one of them
	// served then. Omitted from agents before shares.
	ShareCPUs float64 `json:"share_cpus,omitempty"`
	Jobs      int     `json:"jobs,omitempty"`
	// ShareReplan says that this epoch runs a new plan because the share
	// changed since the last plan (jobs came or went), from what to what.
	ShareReplan string `json:"share_replan,omitempty"`
	// PlanSource is what the epoch's plan was made from: PlanEstimate,
	// PlanProfile or PlanMeasured; omitted for an epoch without a plan
	// (No-Off while stage 2 records, or no profile at all).
	PlanSource string `json:"plan_source,omitempty"`
	// PlanSwitchedAt, in a first epoch that started under No-Off while
	// stage 1 measured beside it (Stage1Summary.Overlapped), is how many
	// of its positions had been requested raw when the plan took over the
	// rest (omitted when the epoch ran one plan throughout).
	PlanSwitchedAt int `json:"plan_switched_at,omitempty"`
	// Resplits are the epoch's re-splits in its order: each time the
	// planner handed the positions not yet requested a plan made for the
	// link rate it measured while the epoch ran (the compute agent's
	// --resplit; omitted when none).
	Resplits []Resplit `json:"resplits,omitempty"`
	// Refined counts the samples whose measurements this epoch merged
	// into an estimated profile (profiler.Refine) for the next epoch's
	// plan (omitted when none).
	Refined int `json:"refined,omitempty"`
	// Stage1 is stage 1's rates and decision, in the first epoch's report
	// only.
	Stage1 *Stage1Summary `json:"stage1,omitempty"`
}

// Resplit is one change of plan within an epoch that followed the link
// (EpochReport.Resplits).
type Resplit struct {
	// AtSeconds is when, in seconds from the epoch's start.
	AtSeconds float64 `json:"at_seconds"`
	// Kind is ResplitLink (the measured rate moved past the threshold for
	// the hold), ResplitProbe (the plan for the rate before a drop tried
	// again) or ResplitRevert (that probe found the link still slow: the
	// plan before it back).
	Kind string `json:"kind"`
	// Reason says why in words: the rate measured against the plan's.
	Reason string `json:"reason"`
	// MeasuredBytesPerSec is the rate the epoch's bytes arrived at over
	// the last second; PlanBytesPerSec the link rate the plan it replaced
	// was made for, NewBytesPerSec the one the new plan was made for.
	MeasuredBytesPerSec float64 `json:"measured_bytes_per_sec"`
	PlanBytesPerSec     float64 `json:"plan_bytes_per_sec"`
	NewBytesPerSec      float64 `json:"new_bytes_per_sec"`
	// Requested is how many of the epoch's positions had been requested
	// before: the new plan has the rest.
	Requested int `json:"requested"`
	// PredictedRemainingSeconds is the new plan's predicted time for the
	// positions left: its whole epoch's prediction times the share of the
	// shard left.
	PredictedRemainingSeconds float64 `json:"predicted_remaining_seconds"`
}

// Resplit kinds.
const (
	ResplitLink   = "link"
	ResplitProbe  = "probe"
	ResplitRevert = "revert"
)

// Prediction is a plan's predicted epoch per resource
// (policy.Prediction) and the resources the model assumed
// (policy.Resources, as the planner had them when it made the plan). The
// model's epoch is the largest of the four resource times; each time is a
// quantity over its resource: LinkSeconds = Bytes / LinkBytesPerSec,
// StorageSeconds = StorageCPUSeconds / StorageCores, ComputeSeconds =
// ComputeCPUSeconds / ComputeCores. For a plan made per storage agent
// (EpochReport.Cluster) the times are each the slowest node's and the
// quantities the nodes' sums; the resources are then the pooled ones the
// cluster was made from.
type Prediction struct {
	// Seconds is the predicted epoch: the largest of the four times
	// below (EpochReport.PredictedSeconds). With work-conserving offload
	// (the default) it, and every figure below, is of the plan as the
	// compute agent's shedder runs it: the least efficient offloads
	// requested raw until the storage time is within the shedder's slack
	// of the link time (planner.Shed).
	Seconds float64 `json:"seconds"`
	// PlanSeconds is the plan's own predicted epoch, every offload run as
	// planned: Seconds when nothing is shed.
	PlanSeconds float64 `json:"plan_seconds,omitempty"`
	// Shed is how many of the plan's offloads the prediction moved raw
	// (omitted when none).
	Shed int `json:"shed,omitempty"`
	// LinkSeconds is the time the payload needs on the link.
	LinkSeconds float64 `json:"link_seconds"`
	// StorageSeconds is the time the storage cores need for the storage
	// CPU.
	StorageSeconds float64 `json:"storage_seconds"`
	// ComputeSeconds is the time the compute cores need for the compute
	// CPU.
	ComputeSeconds float64 `json:"compute_seconds"`
	// GPUSeconds is the time the consumer needs for the epoch's samples.
	GPUSeconds float64 `json:"gpu_seconds"`
	// Bytes is the payload predicted to cross the link (the wire form,
	// without gRPC framing or TLS).
	Bytes float64 `json:"bytes"`
	// StorageCPUSeconds is the predicted storage CPU, ops and transport
	// (StorageNSPerByte per byte), already divided by StorageSpeed: CPU
	// seconds of the storage side's own cores.
	StorageCPUSeconds float64 `json:"storage_cpu_seconds"`
	// ComputeCPUSeconds is the predicted compute CPU: finishing ops[k:n]
	// and decoding the wire form, on this node's cores.
	ComputeCPUSeconds float64 `json:"compute_cpu_seconds"`
	// Bottleneck names the resource that sets Seconds: link, storage-cpu,
	// compute-cpu or gpu (profiler.Bottleneck*).
	Bottleneck string `json:"bottleneck"`
	// LinkBytesPerSec is the link's payload rate the model assumed
	// (stage 1's measurement, or the profile's running mean); 0 means
	// unlimited.
	LinkBytesPerSec float64 `json:"link_bytes_per_sec"`
	// StorageCores is the storage cores the model assumed (the storage
	// agents' --cpus, summed); 0 means unlimited.
	StorageCores float64 `json:"storage_cores"`
	// ComputeCores is the compute cores the model assumed (this agent's
	// --workers, or the CPUs it sees); 0 means unlimited.
	ComputeCores float64 `json:"compute_cores"`
	// StorageSpeed is the storage CPU's speed relative to this node's
	// that the model assumed (stage 1's probe); 0 means 1.
	StorageSpeed float64 `json:"storage_speed"`
	// StorageNSPerByte is the storage CPU per payload byte sent beyond
	// the ops that the model assumed; 0 means free.
	StorageNSPerByte float64 `json:"storage_ns_per_byte,omitempty"`
	// ComputeNSPerSample is the compute CPU per sample beyond the ops
	// that the model assumed (receiving, the engine, the hand-off, the
	// garbage collector; ProcessCPUSeconds less ComputeCPUSeconds per
	// sample, as earlier epochs measured it); 0 means free. The
	// prediction's compute CPU holds it.
	ComputeNSPerSample float64 `json:"compute_ns_per_sample,omitempty"`
}

// CacheStats is an epoch's account of the compute node's cache.
type CacheStats struct {
	// Policy is planned (the plan's residency, policy.Plan.Cached) or lru.
	Policy string `json:"policy"`
	// Split is the split entries are kept at: 0 the encoded file, the
	// pipeline's length its finished output (ops.Pipeline.CacheSplit).
	Split int `json:"split"`
	// Wanted counts the positions the cache was to serve or fill: the
	// plan's resident samples, or under lru every raw fetch.
	Wanted int `json:"wanted"`
	// Hits counts the positions served from the cache: no link, no
	// storage CPU.
	Hits int `json:"hits"`
	// Misses counts the wanted positions absent from it, fetched over
	// the link (raw) and filled.
	Misses int `json:"misses"`
	// Fills counts the entries put (misses and refills that fit the
	// budget and passed the content check), written by the cache's writer
	// before the epoch's report (a write that fails degrades the cache).
	Fills int `json:"fills"`
	// Refills counts the entries found bad (corrupt, truncated, swapped,
	// foreign, stale, forged, or raw bytes that do not match the
	// catalog's content hash) when read, or when the cache was opened (those count
	// in the first epoch's report, and their samples among its misses):
	// dropped, never served, fetched again.
	Refills int `json:"refills"`
	// Forged counts the refills whose entry had a valid header and
	// checksum but not the MAC the agent signs entries with (a key kept
	// outside the cache directory, --cache-key-file): written by someone
	// else, or under a key since replaced. Omitted when 0.
	Forged int `json:"forged,omitempty"`
	// ReadBytes is the entry bytes read locally for the hits; the link's
	// bytes are BytesReceived.
	ReadBytes int64 `json:"read_bytes"`
	// ResidentSamples and ResidentBytes are what the cache holds at the
	// epoch's end (every dataset and pipeline in it), under BudgetBytes.
	ResidentSamples int   `json:"resident_samples"`
	ResidentBytes   int64 `json:"resident_bytes"`
	BudgetBytes     int64 `json:"budget_bytes"`
	// Degraded: the cache turned itself off for the rest of the run,
	// after one warning: it could not be used when opened (a directory
	// that cannot be created, opened, locked or written, a key file that
	// cannot be read or made, an index that cannot be read or is over its
	// 1 GiB limit) or a write failed later (full disk, vanished
	// directory). The epoch ran without it.
	Degraded bool `json:"degraded,omitempty"`
}

// ServedRaw counts offload requests answered raw, by reason.
type ServedRaw struct {
	// Contended: the storage agent's CPU budget could not finish them
	// before their raw bytes would have crossed the link (work-conserving
	// offload; Config.StrictOffload turns it off).
	Contended int `json:"contended"`
	// Uncuttable: JPEG-domain crops of files that cannot be cut exactly.
	Uncuttable int `json:"uncuttable"`
}

// SampleFailure is one bad sample.
type SampleFailure struct {
	// Sample is the sample's id.
	Sample uint64 `json:"sample"`
	// Path is the sample's file: its path relative to the dataset's root
	// (for a tar shard's member, the shard's name, a slash and the
	// member's name), quoted when not printable UTF-8, from the storage
	// agent's catalog (CatalogPage.paths, checked against its
	// paths_digest). Omitted when the catalog has no paths (a storage
	// agent that sends none, or over 1 GiB of paths).
	Path string `json:"path,omitempty"`
	// Split is the split k it was requested at.
	Split int `json:"split"`
	// Kind is the proto ErrorKind without its prefix (CORRUPT,
	// TRUNCATED, ...) for storage errors, the same names for local ops
	// errors, WIRE for a bad wire form, KindUnavailable for a sample no
	// live storage agent holds.
	Kind string `json:"kind"`
	// Message is the error's text.
	Message string `json:"message"`
	// Where is "storage" (the storage agent's ops[0:k] or read) or
	// "local" (decoding the wire form or ops[k:n]).
	Where string `json:"where"`
}

// KindUnavailable is the Kind of a sample that no live storage agent of
// the epoch holds (its shard's owners are gone).
const KindUnavailable = "UNAVAILABLE"

func (f SampleFailure) Error() string {
	if f.Path != "" {
		return fmt.Sprintf("sample %d (%s, split %d, %s): %s: %s", f.Sample, f.Path, f.Split, f.Where, f.Kind, f.Message)
	}
	return fmt.Sprintf("sample %d (split %d, %s): %s: %s", f.Sample, f.Split, f.Where, f.Kind, f.Message)
}

// StorageStats is one storage agent's share of an epoch.
type StorageStats struct {
	// Name is the storage agent's name.
	Name string `json:"name"`
	// Conns is the connections the epoch's fetch streams to it were
	// spread over (compute-agent --conns); 0 in reports from before.
	Conns int `json:"conns,omitempty"`
	// Samples counts the responses accepted from it.
	Samples int64 `json:"samples"`
	// Bytes is their wire bytes.
	Bytes int64 `json:"bytes"`
	// Shards is how many shards the agent held at the epoch's start; 0
	// when it announced no layout (it holds every sample).
	Shards int `json:"shards,omitempty"`
	// OpsCPUSeconds is the storage CPU its responses reported for their
	// ops (storage_cpu_ns, on the agent's own clock).
	OpsCPUSeconds float64 `json:"ops_cpu_seconds"`
	// Predicted is the plan's load on this agent, when the plan was made
	// per storage agent (EpochReport.Cluster); nil otherwise.
	Predicted *StoragePrediction `json:"predicted,omitempty"`
	// Link is the link to this agent (EpochReport.Link).
	Link *Link `json:"link,omitempty"`
}

// Link is what was measured of the link to the storage agents (linkwatch:
// TCP_INFO at both ends, and a timed Info call where neither is read): of
// one storage agent in StorageStats, of all of them together in
// EpochReport and Stage1Summary.
type Link struct {
	// RTTSeconds is the mean round trip, MinRTTSeconds the least the
	// kernel saw (the path without its queues); RTTFrom says where they
	// came from: storage_tcp_info (the storage agent's end, which sends
	// the data), compute_tcp_info (this agent's sockets) or info_rpc (a
	// timed Info call).
	RTTSeconds    float64 `json:"rtt_seconds"`
	MinRTTSeconds float64 `json:"min_rtt_seconds"`
	RTTFrom       string  `json:"rtt_from,omitempty"`
	// Retransmits and SegmentsOut are the storage agents' TCP segments
	// sent again and sent meanwhile; Loss is their ratio, LossKnown false
	// when a storage agent did not report its end (then they are 0).
	Retransmits uint64  `json:"retransmits"`
	SegmentsOut uint64  `json:"segments_out"`
	Loss        float64 `json:"loss"`
	LossKnown   bool    `json:"loss_known"`
	// InFlightMeanBytes and InFlightPeakBytes are the TCP bytes the
	// storage agents had sent and not yet had acknowledged, over the
	// epoch's readings (omitted when unknown).
	InFlightMeanBytes int64 `json:"in_flight_mean_bytes,omitempty"`
	InFlightPeakBytes int64 `json:"in_flight_peak_bytes,omitempty"`
	// WindowBytes and WindowCount are the fetch window the engine used
	// per storage agent at the epoch's end (bandwidth x round trip, within
	// --window-bytes; engine/link.go), WindowPeakBytes the most
	// estimated response bytes it had outstanding (omitted outside an
	// epoch).
	WindowBytes     int64 `json:"window_bytes,omitempty"`
	WindowCount     int   `json:"window_count,omitempty"`
	WindowPeakBytes int64 `json:"window_peak_bytes,omitempty"`
	// Readings is how many readings were taken.
	Readings int `json:"readings"`
}

// StoragePrediction is a cluster plan's load on one storage agent
// (policy.StorageLoad), for one epoch.
type StoragePrediction struct {
	// Samples is the number of samples the plan has it serve.
	Samples int `json:"samples"`
	// Bytes is the payload it is to send.
	Bytes float64 `json:"bytes"`
	// CPUSeconds is its predicted storage CPU, ops and transport, on its
	// own clock.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUTime and EgressTime are the epoch seconds its cores and its link
	// need: CPUSeconds over its cores and Bytes over its link rate (0
	// when unlimited).
	CPUTime    float64 `json:"cpu_time"`
	EgressTime float64 `json:"egress_time"`
}

// SplitStats counts delivered samples at one split.
type SplitStats struct {
	// Split is the split k the samples arrived at.
	Split int `json:"split"`
	// Samples counts the delivered samples.
	Samples int `json:"samples"`
	// Bytes is their wire bytes.
	Bytes int64 `json:"bytes"`
}

// SplitCounter tallies delivered samples by split, for
// EpochReport.BySplit. Make it with a literal; not safe for concurrent
// use.
type SplitCounter map[int]*SplitStats

// Add counts a sample delivered at split k with bytes on the wire.
func (c SplitCounter) Add(k int, bytes int64) {
	s := c[k]
	if s == nil {
		s = &SplitStats{Split: k}
		c[k] = s
	}
	s.Samples++
	s.Bytes += bytes
}

// List is the tally by ascending split.
func (c SplitCounter) List() []SplitStats {
	out := make([]SplitStats, 0, len(c))
	for _, s := range c {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b SplitStats) int { return a.Split - b.Split })
	return out
}

// GPUStats is what a GPU monitor saw during one epoch.
type GPUStats struct {
	// Status is "nvml: ok" or "nvml: unavailable: <reason>".
	Status string `json:"status"`
	// Devices is the number of GPUs sampled.
	Devices int `json:"devices"`
	// Samples is the number of utilisation readings taken.
	Samples int `json:"samples"`
	// MeanUtil is the readings' mean over readings and devices, in
	// percent.
	MeanUtil float64 `json:"mean_util_pct"`
}

// TrainerStats is one rank's part of an epoch.
type TrainerStats struct {
	// Rank is the trainer's global rank.
	Rank int `json:"rank"`
	// LocalRank is its rank on this node.
	LocalRank int `json:"local_rank"`
	// Batches counts the batches it was handed.
	Batches int `json:"batches"`
	// Samples counts the rows of those batches.
	Samples int `json:"samples"`
	// Repeated counts the rows among Samples that repeat one of the
	// rank's first rows, filling rows that failed samples left free at
	// the end of its epoch (--on-error skip; docs/training.md); they are
	// not counted in the epoch's Samples.
	Repeated int `json:"repeated,omitempty"`
	// WaitSeconds is the time the rank's training loop was blocked on the
	// loader: the measure of its GPU's idleness.
	WaitSeconds float64 `json:"wait_seconds"`
}

// Stage1Summary.Profile values.
const (
	// ProfileNone: no profile; every epoch runs No-Off.
	ProfileNone = "none"
	// ProfileRecorded: stage 2 recorded the profile in the first epoch.
	ProfileRecorded = "recorded"
	// ProfileLoaded: a saved profile was reused; stage 2 did not run.
	ProfileLoaded = "loaded"
	// ProfileEstimated: no saved profile; the profile was estimated from
	// the catalog's JPEG headers and calibrated on stage 1's samples
	// (profiler/estimate), and the first epoch ran its plan.
	ProfileEstimated = "estimated"
)

// EpochReport.PlanSource values.
const (
	// PlanEstimate: the plan was made from the profile estimated from the
	// catalog's headers, before any epoch measured the samples.
	PlanEstimate = "estimate"
	// PlanProfile: the plan was made from a saved or recorded stage 2
	// profile.
	PlanProfile = "profile"
	// PlanMeasured: the plan was made from the estimated profile refined
	// with what earlier epochs measured of the samples
	// (profiler.Refine).
	PlanMeasured = "measured"
)

// Stage1Summary is stage 1's decision in the first epoch's report of a
// policy run.
type Stage1Summary struct {
	// LinkBytesPerSec is the measured link rate.
	LinkBytesPerSec float64 `json:"link_bytes_per_sec"`
	// ComputeSamplesPerSec is this node's CPU rate for the whole
	// pipeline, all its workers together.
	ComputeSamplesPerSec float64 `json:"compute_samples_per_sec"`
	// ComputeCores is the compute cores the model planned with: the
	// least of --workers, the CPUs the agent may run on and its cgroup's
	// CPU quota (cpuquota.Cores).
	ComputeCores float64 `json:"compute_cores,omitempty"`
	// StorageSamplesPerSec is the storage node's CPU rate for the whole
	// pipeline.
	StorageSamplesPerSec float64 `json:"storage_samples_per_sec"`
	// GPUSamplesPerSec is the consumer's rate.
	GPUSamplesPerSec float64 `json:"gpu_samples_per_sec"`
	// StorageSpeed is the storage CPU's speed relative to this node's (0:
	// unmeasured, taken as 1).
	StorageSpeed float64 `json:"storage_speed"`
	// StorageSpeedRSE is StorageSpeed's relative standard error over the
	// samples stage 1's storage probe compared (omitted when fewer than
	// two were).
	StorageSpeedRSE float64 `json:"storage_speed_rse,omitempty"`
	// PredictedNoOffSeconds is stage 1's prediction of a No-Off epoch.
	PredictedNoOffSeconds float64 `json:"predicted_nooff_seconds"`
	// Bottleneck names the resource that bounds a No-Off epoch
	// (profiler.Decision.Bottleneck).
	Bottleneck string `json:"bottleneck"`
	// Stage2 is true when stage 1 decided to profile every sample (stage
	// 2): when the link is the bottleneck, or when forced.
	Stage2 bool `json:"stage2"`
	// Forced is true when stage 2 was forced by configuration (omitted
	// when false).
	Forced bool `json:"forced,omitempty"`
	// Reason explains Stage2 in one sentence.
	Reason string `json:"reason"`
	// Profile is ProfileNone, ProfileRecorded (stage 2 ran in this epoch),
	// ProfileLoaded (a saved profile was reused) or ProfileEstimated.
	Profile string `json:"profile"`
	// Seconds is how long stage 1 took, with the estimate's calibration
	// and first plan when Profile is ProfileEstimated. Unless Overlapped
	// it is the time before the first epoch could start, not in its
	// StartWaitSeconds (but, in trainer mode, in its FirstBatchSeconds
	// where a rank asked during it).
	Seconds float64 `json:"seconds"`
	// Link is the round trip and loss stage 1 measured on the link to
	// the storage agents (the windows are the engine's: omitted here).
	Link *Link `json:"link,omitempty"`
	// Overlapped: stage 1 ran beside the first epoch, which started at
	// once under No-Off and took the plan from header estimates for the
	// positions not yet requested when it was ready
	// (EpochReport.PlanSwitchedAt); Seconds is then inside the epoch's
	// (omitted when false).
	Overlapped bool `json:"overlapped,omitempty"`
}

// Append appends r as one JSON line to path, creating the file.
func Append(path string, r EpochReport) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadReport reads the complete lines of a report file (Config.ReportPath)
// written so far: a last line still being written is left out, and a file
// not created yet reads as no epochs.
func ReadReport(path string) ([]EpochReport, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []EpochReport
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // a line still being written
		}
		var r EpochReport
		if err := json.Unmarshal(b[:i], &r); err != nil {
			return nil, fmt.Errorf("report %s: %w", path, err)
		}
		out = append(out, r)
		b = b[i+1:]
	}
	return out, nil
}
