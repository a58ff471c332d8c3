// Package engine runs the compute agent's epochs: one epoch of a plan
// over gRPC, from the order to the report. Run is an epoch's one entry:
// it opens the journal and the node's cache, decides the shard, builds
// the trainer ranks' assembler, runs the epoch and writes its report and
// its completion. The fetchers keep a Fetch stream per storage agent and
// connection busy (windows, retries, stall hedging, pacing, the raw
// refetch of a failed cut; Fetcher.Stripe spreads them over several
// connections); the placement spreads an epoch's positions over the
// storage agents that hold them (package catalog says who holds what);
// raw bytes are checked against the catalog's content hashes; and the
// epoch's run (finishing workers, batcher, feeder, the node's cache) ends
// in its report. It takes the plan as a small interface (Plan) and
// imports neither the planner nor the policy; it drives package schedule,
// which does no I/O; the root package fills Config with what the engine
// needs from the agent.
package engine

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/batch"
	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/journal"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/trainer"
	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// Config is what an epoch needs from the agent: its limits, its pipeline
// and the hooks to the rest of the agent. The root fills every field from
// its own, validated configuration; zero values are not defaulted here.
type Config struct {
	// Log is the agent's logger; an epoch adds its number.
	Log zerolog.Logger
	// Now is the agent's clock (epoch timing, GPU idle time, progress and
	// stall deadlines).
	Now func() time.Time
	// Metrics receives the epoch's counters; nil: none.
	Metrics Metrics
	// Warnings rate-limits and counts the warnings a storage agent causes
	// per response (a response for no request); nil logs every one.
	Warnings *peerlog.Limiter
	// Refusals are the storage agents refused for the run (content
	// checks add to them); nil: none is refused.
	Refusals *catalog.Refusals
	// Consumer takes the batches (not in trainer mode or FetchOnly).
	Consumer Consumer
	// OnSample, when set, is called once per delivered sample with its
	// hash (computeagent.Config.OnSample).
	OnSample func(epoch, sample uint64, sha [32]byte)

	// Pipeline is the agent's part of the pipeline, PipelineID its id and
	// PipelineSpec its spec, sent on each stream's first request (nil for
	// a preset).
	Pipeline     *ops.Pipeline
	PipelineID   string
	PipelineSpec []byte
	// Sizes estimates wire sizes by split; it learns from every response.
	Sizes *schedule.SizeModel
	Seed  uint64
	Codec wireform.Codec

	// The limits and modes of computeagent.Config of the same names.
	Workers     int
	Queue       int
	Batch       int
	Window      int
	WindowBytes int64
	// RecvWindow is the connections' gRPC stream window
	// (computeagent.Config.RecvWindow; 0: grpc's own, which follows the
	// bandwidth-delay product): a stream carries at most this much per
	// round trip, so the epoch warns when the link's bandwidth x round
	// trip is more (link.go).
	RecvWindow    int
	MaxPayload    int
	Retries       int
	RetryBudget   time.Duration
	StallTimeout  time.Duration
	Progress      time.Duration
	StrictOrder   bool
	StrictOffload bool
	FetchOnly     bool
	// FailOnError fails the epoch at its first bad sample (--on-error
	// fail); false reports bad samples and runs on.
	FailOnError bool
	// RoundRobin binds each position to one of the storage agents holding
	// it (--placement round-robin); false lets every fetcher pull.
	RoundRobin bool
	// Limits bound the ops the finishing workers run on each sample (its
	// deadline starts when the sample's ops do). Zero fields: no limit.
	Limits oplimits.Settings
	// Journal is the sample log and resume state and Cache the node's
	// sample cache (see cache.Use), each opened by the first epoch that
	// needs it (Run); nil: none.
	Journal *journal.Lazy
	Cache   *cache.Lazy
	// ReportPath, when set, is the file each epoch's report is appended to
	// (report.Append), failed or not.
	ReportPath string

	// Rank and World are the agent's place among the compute agents: its
	// shard of each epoch (schedule.RankOrder). DropLast cuts each rank's
	// order to full batches instead of padding it.
	Rank, World int
	DropLast    bool
	// TailOps are the ops after Pipeline that the trainer client runs on
	// its device (uint8 slots: the trailing to_tensor and normalize): a
	// plan names splits of the whole pipeline, so a split past the agent's
	// part is cut back to its end.
	TailOps int
	// Trainer are the series of the trainer ranks' assembler (trainer
	// mode).
	Trainer *trainer.Metrics
	// GPU samples the GPU's utilisation while an epoch runs; nil: none.
	GPU GPU
}

// GPU samples GPU utilisation: Sample blocks until ctx ends and returns
// what it saw meanwhile.
type GPU interface {
	Sample(ctx context.Context) report.GPUStats
}

// Metrics are the agent's counters an epoch moves. The root's Prometheus
// series implement it.
type Metrics interface {
	// Failure counts a bad sample.
	Failure()
	// Retried counts n requests issued again.
	Retried(n int)
	// Received counts a response's wire bytes at its split.
	Received(split, bytes int)
	// Delivered counts n samples handed to the consumer.
	Delivered(n int)
	// Running is the epoch that runs now, nil once it ended (the queue
	// gauge).
	Running(e *Epoch)
	// Completed counts an epoch done.
	Completed()
}

// Consumer is the GPU side: it takes one batch at a time (package batch). Consume blocks
// for as long as the step takes.
type Consumer interface {
	Consume(ctx context.Context, b *batch.Batch) error
}
