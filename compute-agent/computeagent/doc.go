// Package computeagent is the compute agent: it runs on the GPU node, finds
// the storage agents (gossip or a static list), reads the dataset catalog,
// and runs training epochs whose samples are preprocessed partly on the
// storage agents and finished here.
//
// Data flow of one epoch:
//
//	order (seed, epoch, rank, world)
//	  -> schedule: positions to request, retries first
//	  -> one fetcher per storage agent (package engine): a Fetch stream, a window of requests in flight
//	  -> finishing workers: decode the wire form, run ops[k:n], time it on the thread CPU clock
//	  -> the shared queue (bounded: Config.Queue batches)
//	  -> batcher: [B, C, H, W] float32 batches with labels
//	  -> feeder -> Consumer (the GPU, or Sim)
//
// In trainer mode (Config.Trainer, package trainer) the node's
// trainer processes connect to a Unix socket and get one memfd ring of
// batch slots each; the finishing workers copy each finished sample
// straight into a row of a leased slot (the local ranks share one queue in
// completion order), a full slot is announced to its rank, and the rank's
// release makes it free again. docs/handoff.md is the protocol.
//
// Each request names its sample, epoch, seed, split k and pipeline, so any
// storage agent can serve any request and a retry can go anywhere. Fetchers
// pull positions from one shared schedule, so faster storage agents take
// more of the epoch.
//
// Guarantees:
//
//   - Exactly once: each sample of the shard (ids i with i % World == Rank)
//     is delivered to the consumer exactly once per epoch, or, under
//     OnError "skip", reported as failed instead. A stream failure returns
//     the stream's outstanding requests to the schedule; a response is
//     accepted only for a request outstanding on its own stream and a
//     position not yet received.
//   - Order: batches form in completion order by default, so one slow
//     sample delays only its own batch (SpeedyLoader's head-of-line
//     lesson). With StrictOrder they form in the epoch's permutation
//     order, through a reorder buffer bounded by the total window.
//   - Same bytes wherever ops run: the tensors do not depend on the plan
//     (ops' split invariance); Config.OnSample exposes their hashes to
//     prove it.
//   - Bounded memory: per storage agent at most Window requests and about
//     WindowBytes of responses are between request and shared queue; a
//     request's slot is freed only when its result enters the queue. A full
//     queue stops the workers, which stop taking responses, which leaves
//     the windows full, so no new requests go out.
//
// With Config.Policy the agent runs a policy run (planner.Run): stage
// 1 measures the link, storage CPU, compute CPU and consumer rates
// (stage1.Run); stage 2 profiles every sample during the first, No-Off,
// epoch when the link is the bottleneck, or reuses a saved profile; the
// policy's plan then runs the later epochs, and a measured rate that
// drifts from the plan's assumptions triggers a re-plan.
//
// With Config.CacheDir the node keeps samples in a local cache (package
// cache, cache.go): the plan's resident samples (policy.Plan.Cached, under
// Config.CacheBytes, which the planner plans with) are fetched raw once
// and read locally from then on, each entry checked on every read and
// refetched when bad; the LRU policy is the baseline of a plain file
// cache. The tensors are the same with and without it.
//
// Bad samples (a per-sample error from the storage agent, or a failure
// decoding the wire form or running ops[k:n] here) are recorded in the
// epoch's report; OnError chooses between failing the epoch and skipping
// the sample. A DEADLINE error (the storage agent's queue was too long) is
// retried up to Config.Retries times first.
//
// Faults cost time, not the run (package engine, schedule.RetryDelay): a failed
// stream, Info or Catalog is retried with exponential back-off and jitter
// until its storage agent made no progress for Config.RetryBudget; a
// stream silent for the stall timeout with requests out is hedged (its
// positions go back to the schedule while still outstanding; the first
// response wins, the other is dropped as a duplicate) and cancelled. With
// Config.StateDir the sample log is a journal a restarted agent resumes
// from (package journal).
package computeagent
