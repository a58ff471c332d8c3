package computeagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
)

// EpochReport is one epoch's account, written as one JSON line per epoch
// to Config.ReportPath and returned by Run. Schema (JSON keys):
//
//	epoch                int      epoch number
//	seconds              float    wall time from the first request to the last batch consumed
//	start_unix_ns        int      when the epoch began and ended (Unix ns, the agent's clock), to
//	end_unix_ns          int      match the epoch with outside counters (e.g. a NIC's bytes)
//	pipeline             string   ops.Pipeline.ID()
//	plan                 string   the plan's name (nooff, alloff, resizeoff or a plan file)
//	strict_order         bool     batches in permutation order (else completion order)
//	fetch_only           bool     a link test: samples validated, not finished or consumed (omitted when false)
//	storage              []string storage agents used (names)
//	shard                int      samples in this agent's shard (rank of world)
//	samples              int      samples delivered to the consumer
//	batches              int      batches delivered
//	samples_failed       int      len(failed)
//	failed               []{sample, split, kind, message, where}
//	                              kind: the proto ErrorKind without its prefix (CORRUPT,
//	                              TRUNCATED, ...) for storage errors, the same names for local
//	                              ops errors, WIRE for a bad wire form; where: storage or local
//	bytes_received       int      wire bytes received (FetchResponse.data), failed samples included
//	by_split             []{split, samples, bytes}  delivered samples and their wire bytes per split
//	                              they arrived at (-1: the JPEG-domain crop; 0 includes offloads
//	                              answered raw)
//	served_raw           {contended, uncuttable}  offloads the storage agents answered raw: their CPU
//	                              could not keep up (work-conserving offload), or the file cannot
//	                              be cut exactly (omitted when none was)
//	gpu_idle_seconds     float    time the consumer waited for a batch
//	gpu_idle_fraction    float    gpu_idle_seconds / seconds
//	compute_cpu_seconds  float    thread CPU time of the finishing workers (decode wire, ops[k:n])
//	storage_cpu_seconds  float    sum of FetchResponse.storage_cpu_ns over received samples
//	retried              int      requests re-issued after stream failures
//	stream_failures      int      Fetch streams that failed
//	duplicates           int      responses dropped as duplicates: the losing copy of a hedged
//	                              request (0 without stalls)
//	stalls               int      streams declared stalled (no response within the stall timeout)
//	hedged               int      requests of stalled streams re-issued to other storage agents
//	resumed              int      samples of this epoch delivered before a restart (Config.StateDir;
//	                              omitted when 0): shard counts only the rest
//	status               string   "ok", "failed" (error says why) or "interrupted" (the agent was
//	                              stopped mid-epoch); counters then cover the part that ran
//	error                string   why the epoch failed (omitted when ok)
//	gpu                  {status, devices, samples, mean_util_pct}  NVML's view; status is
//	                              "nvml: ok" or "nvml: unavailable: <reason>"
//	consumer             string   "trainer" when trainer processes took the batches (omitted: sim)
//	trainers             []{rank, local_rank, batches, samples, wait_seconds}  per local rank;
//	                              wait_seconds is the time its training loop was blocked on the
//	                              loader (its GPU's idle time); gpu_idle_seconds is their mean
//
// A policy run (Config.Policy) adds:
//
//	policy               string   the policy (nooff, alloff, resizeoff, fastflow, sophon, optimal)
//	predicted_seconds    float    the predicted epoch time: the plan's Prediction.Seconds, or stage
//	                              1's No-Off prediction for an epoch run before a profile exists
//	bound_seconds        float    policy.Bound: the lower bound on any plan's epoch time for the
//	                              profile and resources (omitted while there is no profile)
//	offload_storage_cpu_seconds float  storage_cpu_seconds of the samples fetched at k > 0
//	offload_storage_effective_cpu_seconds float  the same samples' storage_budget_ns times their
//	                              agent's per-worker share of a core: their CPU time when the agent
//	                              got its whole budget, more when it did not (a cgroup quota shared
//	                              with the transport, a busy machine); 0 from agents that do not report it
//	profiled             bool     stage 2 recorded this epoch's samples (omitted when false)
//	replanned            bool     this epoch's measured link rate or storage CPU drifted from the
//	                              plan's assumptions past Config.ReplanThreshold, or the epoch was
//	                              slower than the last measured No-Off epoch (the measured guard),
//	                              so the next epoch runs a new plan (omitted when false)
//	replan_reason        string   why: "drift: ..." and/or "guard: ..." (omitted when not replanned)
//	stage1               {link_bytes_per_sec, compute_samples_per_sec, storage_samples_per_sec,
//	                      gpu_samples_per_sec, storage_speed, predicted_nooff_seconds,
//	                      bottleneck, stage2, forced, reason, profile}
//	                              first epoch only: stage 1's rates and decision; storage_speed is
//	                              the storage CPU's speed relative to this node's (0: unmeasured,
//	                              taken as 1); profile is none, recorded (stage 2 ran in this
//	                              epoch) or loaded (a saved profile was reused)
type EpochReport struct {
	Epoch       uint64   `json:"epoch"`
	Seconds     float64  `json:"seconds"`
	StartUnixNS int64    `json:"start_unix_ns"`
	EndUnixNS   int64    `json:"end_unix_ns"`
	Pipeline    string   `json:"pipeline"`
	Plan        string   `json:"plan"`
	StrictOrder bool     `json:"strict_order"`
	FetchOnly   bool     `json:"fetch_only,omitempty"`
	Storage     []string `json:"storage"`
	// ByStorage is what each storage agent of Storage served, in the
	// same order: samples accepted and their wire bytes.
	ByStorage []StorageStats `json:"by_storage,omitempty"`
	// StorageNSPerByte is the storage agents' CPU per byte sent beyond
	// their ops (reads, gRPC, TLS), measured over the epoch from their
	// process CPU (see transport); 0 when not measured.
	StorageNSPerByte  float64         `json:"storage_ns_per_byte,omitempty"`
	Shard             int             `json:"shard"`
	Samples           int             `json:"samples"`
	Batches           int             `json:"batches"`
	SamplesFailed     int             `json:"samples_failed"`
	Failed            []SampleFailure `json:"failed"`
	BytesReceived     int64           `json:"bytes_received"`
	BySplit           []SplitStats    `json:"by_split"`
	GPUIdleSeconds    float64         `json:"gpu_idle_seconds"`
	GPUIdleFraction   float64         `json:"gpu_idle_fraction"`
	ComputeCPUSeconds float64         `json:"compute_cpu_seconds"`
	StorageCPUSeconds float64         `json:"storage_cpu_seconds"`
	Retried           int             `json:"retried"`
	StreamFailures    int             `json:"stream_failures"`
	Duplicates        int             `json:"duplicates"`
	Stalls            int             `json:"stalls"`
	Hedged            int             `json:"hedged"`
	// Refetched counts the JPEG-domain cuts that did not finish here
	// (a file whose cut does not decode although the whole file does)
	// and were fetched again raw.
	Refetched int `json:"refetched,omitempty"`
	// ServedRaw counts the offloads storage agents answered with the raw
	// bytes instead (omitted when none was).
	ServedRaw *ServedRaw `json:"served_raw,omitempty"`
	// Shed counts the offloads this agent requested raw because the
	// storage side fell behind the plan (work-conserving offload; see
	// shedder), omitted when none.
	Shed    int `json:"shed,omitempty"`
	Resumed int `json:"resumed,omitempty"`
	// Padded counts the positions that repeat one of the rank's samples so
	// that every rank has the same count (as DistributedSampler pads).
	Padded int      `json:"padded,omitempty"`
	Status string   `json:"status"`
	Error  string   `json:"error,omitempty"`
	GPU    GPUStats `json:"gpu"`
	// Consumer is "trainer" when trainer processes took the batches
	// (Trainers says how each rank fared); omitted for the simulated GPU.
	Consumer string         `json:"consumer,omitempty"`
	Trainers []TrainerStats `json:"trainers,omitempty"`

	Policy                   string         `json:"policy,omitempty"`
	PredictedSeconds         float64        `json:"predicted_seconds,omitempty"`
	BoundSeconds             float64        `json:"bound_seconds,omitempty"`
	OffloadStorageCPUSeconds float64        `json:"offload_storage_cpu_seconds,omitempty"`
	OffloadStorageEffSeconds float64        `json:"offload_storage_effective_cpu_seconds,omitempty"`
	Profiled                 bool           `json:"profiled,omitempty"`
	Replanned                bool           `json:"replanned,omitempty"`
	ReplanReason             string         `json:"replan_reason,omitempty"`
	Stage1                   *Stage1Summary `json:"stage1,omitempty"`
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
	Sample  uint64 `json:"sample"`
	Split   int    `json:"split"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Where is "storage" (the storage agent's ops[0:k] or read) or
	// "local" (decoding the wire form or ops[k:n]).
	Where string `json:"where"`
}

// KindUnavailable is the Kind of a sample that no live storage agent of
// the epoch holds (its shard's owners are gone).
const KindUnavailable = "UNAVAILABLE"

func (f SampleFailure) Error() string {
	return fmt.Sprintf("sample %d (split %d, %s): %s: %s", f.Sample, f.Split, f.Where, f.Kind, f.Message)
}

// StorageStats is one storage agent's share of an epoch.
type StorageStats struct {
	Name    string `json:"name"`
	Samples int64  `json:"samples"`
	Bytes   int64  `json:"bytes"`
	// Shards is how many shards the agent held at the epoch's start; 0
	// when it announced no layout (it holds every sample).
	Shards int `json:"shards,omitempty"`
}

// SplitStats counts delivered samples at one split.
type SplitStats struct {
	Split   int   `json:"split"`
	Samples int   `json:"samples"`
	Bytes   int64 `json:"bytes"`
}

// splitCounter accumulates SplitStats by split.
type splitCounter map[int]*SplitStats

func (c splitCounter) add(k int, bytes int64) {
	s := c[k]
	if s == nil {
		s = &SplitStats{Split: k}
		c[k] = s
	}
	s.Samples++
	s.Bytes += bytes
}

func (c splitCounter) list() []SplitStats {
	out := make([]SplitStats, 0, len(c))
	for _, s := range c {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b SplitStats) int { return a.Split - b.Split })
	return out
}

// appendReport appends r as one JSON line to path.
func appendReport(path string, r EpochReport) error {
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

// servedRaw is the epoch's ServedRaw, nil when no offload was answered raw.
func servedRaw(e *epochRun) *ServedRaw {
	c, u := e.servedRawContended.Load(), e.servedRawUncuttable.Load()
	if c == 0 && u == 0 {
		return nil
	}
	return &ServedRaw{Contended: int(c), Uncuttable: int(u)}
}
