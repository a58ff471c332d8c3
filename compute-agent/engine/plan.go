package engine

import (
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// Plan is what the engine needs of the plan it runs: by sample id, the
// codec, the storage agent that serves it, whether the node's cache keeps
// it and the planner's hints for admission and pacing. The planner's
// indexed plan (planner.RunPlan) satisfies it; the engine never imports
// the planner. A Plan is read by the fetchers concurrently and never
// changed: a re-plan swaps in another (Epoch.Swap).
type Plan interface {
	// Hinted and Hint are the per-sample hints of the shedder.
	schedule.Hints
	// Name is the plan's name in reports and logs.
	Name() string
	// HintAt is Hint of the plan's entry i (At).
	HintAt(i int) (prio uint32, ns uint64)
	// At is sample's entry where the plan lists it at split k; ok is false
	// for a sample the plan lists elsewhere or not at all.
	At(sample uint64, k int) (i int, ok bool)
	// VaryingAt is the payload the plan predicts for its entry i where the
	// size of that sample's split varies from epoch to epoch; ok is false
	// elsewhere.
	VaryingAt(i int) (bytes int64, ok bool)
	// StorageSpeed turns the hints' ns (on the profile's clock) into the
	// planner's: the planner's storage speed, 1 without a profile.
	StorageSpeed() float64
	// StorageNSPerByte is the planner's storage CPU ns per byte sent
	// (policy.Resources.StorageNSPerByte; 0: none), for the shedder.
	StorageNSPerByte() float64
	// Replica is the storage agent the plan chose to serve sample; ok is
	// false where it chose none.
	Replica(sample uint64) (name string, ok bool)
	// Cached reports whether the plan keeps sample resident in the node's
	// cache; Caches, whether it keeps any.
	Cached(sample uint64) bool
	Caches() bool
	// Codec is the codec requested for sample; def where the plan does not
	// decide it.
	Codec(sample uint64, def wireform.Codec) wireform.Codec
	// Split is sample's split, checked against pipe and a pipeline of n
	// ops (pipe and the trainer's tail).
	Split(sample uint64, pipe *ops.Pipeline, n int) (int, error)
}

// Offloads is what an epoch measured of its samples fetched offloaded
// (Epoch.Offloads), the planner's drift check input. Its fields are the
// planner's (planner.Offloads converts from it), kept apart so that the
// engine does not import the planner.
type Offloads struct {
	// StorageNS is their storage CPU time (FetchResponse.storage_cpu_ns).
	StorageNS int64
	// StorageEffNS is their budget time times their agent's per-worker
	// share of a core; 0 from agents that do not report it.
	StorageEffNS int64
	// PlannedNS is the plan's storage CPU estimate (Plan.HintAt over
	// StorageSpeed) of the samples served offloaded as planned. With
	// PlannedNS > 0, StorageNS and StorageEffNS are of those samples only.
	PlannedNS int64
	// Bytes and PlannedBytes are the stored payload bytes that arrived,
	// and that the plan predicted (Plan.VaryingAt), of the samples served
	// as planned at a split whose size varies from epoch to epoch.
	Bytes, PlannedBytes int64
	// TotalEffNS is StorageEffNS of every offload received so far, as
	// planned or not (a re-split within the epoch reads the storage
	// side's load from it).
	TotalEffNS int64
}
