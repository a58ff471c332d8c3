// Command compute-agent runs on the GPU node: it finds the storage agents
// (through gossip or a static list), reads their catalog, and runs training
// epochs, fetching each sample at its planned split, finishing the
// pipeline locally and feeding batches to the node's trainer processes
// (--trainer-socket) or a simulated GPU. See package computeagent,
// docs/architecture.md and docs/training.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/computeagent"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/internal/bytesize"
	"github.com/sophon-dl/sophon/internal/cli"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usageHead = `Usage: compute-agent (--storage ADDRS | --gossip ADDR --join PEERS) (--tls-cert F --tls-key F --tls-ca F | --insecure) [flags]
       compute-agent certs --out DIR [--cluster NAME] [--storage NAMES] [--compute NAMES] [--hosts HOSTS] [--days N]

Runs training epochs against storage agents: each sample of this rank's
shard is fetched once per epoch at its planned split k (the storage agent
runs ops[0:k]), finished here (ops[k:n]), batched and handed to the GPU
consumer. Prints one JSON report line per epoch to --report.

Secure by default: storage agents are dialled with mutual TLS 1.3 and
accepted only when their certificate (signed by --tls-ca, valid for the
dialled host) names them sophon://CLUSTER/storage/NAME, NAME being the member
gossip announced; gossip is encrypted with the cluster's key and labelled
with --cluster. "compute-agent certs" (or make certs) makes a development
CA, the nodes' certificates and a gossip key; --insecure turns it all off.

Example:

  compute-agent --gossip 10.0.0.9:7946 --join 10.0.0.5:7946 \
    --pipeline imagenet-train --plan resizeoff --epochs 3 --seed 1 \
    --gpu sim:resnet50-v100 --report epochs.jsonl \
    --tls-cert compute-c1.pem --tls-key compute-c1-key.pem --tls-ca ca.pem \
    --gossip-key-file gossip.key

  compute-agent --storage 127.0.0.1:7070 --plan plan.json --on-error skip

  compute-agent --storage a:7070,b:7070 --policy sophon --profile prof.zst \
    --epochs 5 --report epochs.jsonl

With --trainer-socket PATH the agent serves the PyTorch trainer processes of
its node (python/sophon's Loader; docs/training.md) instead of the simulated
--gpu: it reads the catalog, listens on PATH and runs each epoch when all of
the node's local ranks asked for it, writing finished crops straight into
their shared-memory batch slots (uint8 by default, normalised by the client
on its device; --dtype float32 ships the whole pipeline's output):

  compute-agent --storage 10.0.0.5:7070 --trainer-socket /tmp/sophon.sock \
    --batch 32 --policy sophon --profile prof.zst --metrics :9102

With --policy the agent plans the splits itself: stage 1 measures the link,
storage CPU, compute CPU and GPU rates (--profile-budget each) and prints
its decision. A valid --profile FILE is reused. Without one the first
epoch starts at once (its first samples raw, the rest cut to their crop
boxes) while stage 1 measures on its traffic beside it, and the policy's
plan, made from the catalog's JPEG header estimates calibrated on those
raw samples, takes over the rest of the epoch (the report's
plan_switched_at); what each epoch measures refines the plan for the
next (plan_source: estimate, then measured). With --force-profile it records a
profile instead: the first epoch runs No-Off and profiles every sample
(stage 2), saved to --profile FILE, and the policy plans each sample's
split and compression for the later epochs. It does the same without
--force-profile where the catalog has no headers (an older storage agent)
and the link is the bottleneck. Each report line adds the policy, the
predicted epoch time and the lower bound; a measured link rate or storage
CPU off the plan's by more than --replan-threshold makes the agent re-plan
for the next epoch.

A --config FILE in YAML takes the same keys as the flags (pipeline: ...,
epochs: 3, storage: [a:7070, b:7070], strict-order: true, ...); flags given
on the command line override the file. A plan FILE is JSON:
{"pipeline": "<id>", "default": K, "splits": {"<sample>": K, ...}}.

Faults cost time, not the run: a storage agent that fails or restarts is
retried with exponential back-off and jitter until it made no progress for
--retry-budget (then it is dropped for the epoch, which fails only when no
storage agent is left); a stream that answers nothing for --stall-timeout
(a stopped process, a black-holed link) has its requests hedged to the
other storage agents. With --state-dir a killed agent, rerun with the same
flags, resumes mid-epoch:

  compute-agent --storage a:7070,b:7070 --epochs 10 --seed 1 \
    --state-dir /var/lib/sophon/run1 --samples-out samples.txt --report epochs.jsonl

A failed epoch still writes its report line (status "failed" and the
error). SIGINT or SIGTERM stops the agent cleanly, with exit status 0 (the
interrupted epoch's report line says "interrupted").

Flags:
`

// settings are the command line and config file keys.
type settings struct {
	cli.Common              `yaml:",inline"`
	computeagent.RunOptions `yaml:",inline"`
	Storage                 cli.List `yaml:"storage"`
	Pipeline                string   `yaml:"pipeline"`
	Plan                    string   `yaml:"plan"`
	GPU                     string   `yaml:"gpu"`
	TrainerSocket           string   `yaml:"trainer-socket"`
	DType                   string   `yaml:"dtype"`
	DropLast                bool     `yaml:"drop-last"`
	Slots                   int      `yaml:"slots"`
	RingBytes               int64    `yaml:"ring-bytes"`
	GCPercent               int      `yaml:"gc-percent"`
	Codec                   string   `yaml:"codec"`
	WorkConserving          bool     `yaml:"work-conserving"`
	Resplit                 bool     `yaml:"resplit"`
}

func defaults() settings {
	run := computeagent.DefaultConfig().RunOptions
	run.Workers = 0 // the flag's default: the number of CPUs
	run.Placement = computeagent.PlacementPull
	run.ProfileBudget = computeagent.DefaultProfileBudget
	run.ReplanThreshold = computeagent.DefaultReplanThreshold
	run.Progress = 10 * time.Second
	return settings{
		Common:         cli.DefaultCommon(),
		RunOptions:     run,
		Pipeline:       "imagenet-train",
		Plan:           "nooff",
		GPU:            "sim:resnet50-v100",
		DType:          "uint8",
		Slots:          computeagent.DefaultSlots,
		RingBytes:      computeagent.DefaultRingBytes,
		Codec:          "none",
		WorkConserving: true,
		Resplit:        true,
		GCPercent:      -1,
	}
}

func flagSet(s *settings, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("compute-agent", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usageHead)
		fs.PrintDefaults()
	}
	s.Common.Register(fs, cli.ComputeRole)
	fs.Var(&s.Storage, "storage", "storage agents' gRPC `addresses`, comma-separated host:port; skips membership")
	fs.IntVar(&s.MinStorage, "min-storage", s.MinStorage, "storage agents to wait for through gossip before each epoch (default 1)")
	fs.StringVar(&s.Pipeline, "pipeline", s.Pipeline, "pipeline preset `name` ("+strings.Join(ops.PresetNames(), ", ")+") or spec FILE (YAML or JSON)")
	fs.StringVar(&s.Plan, "plan", s.Plan, "split `plan`: nooff, alloff, resizeoff or a per-sample plan FILE (JSON)")
	fs.StringVar(&s.Policy, "policy", s.Policy, "plan the splits with a `policy`: "+strings.Join(computeagent.Policies, ", ")+
		"; measures the resources (stage 1), profiles the first epoch when the link is the bottleneck (stage 2) and runs later epochs with the plan; excludes a plan FILE")
	fs.StringVar(&s.ProfilePath, "profile", s.ProfilePath, "stage 2 profile `file`: reused when valid for this dataset and pipeline (stage 2 skipped), else written")
	fs.DurationVar(&s.ProfileBudget, "profile-budget", s.ProfileBudget, "time `limit` of each stage 1 measurement (link, compute CPU)")
	fs.BoolVar(&s.ForceProfile, "force-profile", s.ForceProfile, "without a saved --profile, record one (stage 2: a No-Off first epoch) rather than plan from header estimates, even when the link is not the bottleneck")
	fs.BoolVar(&s.NoRefine, "no-refine", s.NoRefine, "planning from header estimates, keep the estimate: do not refine it with what each epoch measures (every epoch runs the plan from the estimate alone, to compare it with a profiled plan)")
	fs.Float64Var(&s.ReplanThreshold, "replan-threshold", s.ReplanThreshold, "relative drift of the measured link rate or storage CPU from the plan's `fraction` that triggers a re-plan")
	fs.BoolVar(&s.Resplit, "resplit", s.Resplit, "under a --policy, re-split a planned epoch's remaining positions for the link rate it measures when that moves by more than --resplit-threshold for --resplit-hold (less bandwidth: more offload; after a drop the first plan is probed again) (=false: one plan per epoch)")
	fs.Float64Var(&s.ResplitThreshold, "resplit-threshold", s.ResplitThreshold, "relative move of the measured link rate, from the second before's and the plan's (`fraction`), that re-splits an epoch (0: 0.25)")
	fs.DurationVar(&s.ResplitHold, "resplit-hold", s.ResplitHold, "how long the link rate must stay moved before an epoch re-splits (`duration`; 0: 1s)")
	fs.IntVar(&s.Epochs, "epochs", s.Epochs, "`epochs` to run")
	fs.Uint64Var(&s.FirstEpoch, "first-epoch", s.FirstEpoch, "`number` of the first epoch (order and random draws depend on it)")
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "run `seed`: fixes the order and every random draw")
	fs.IntVar(&s.Rank, "rank", s.Rank, "this agent's `rank`: it serves samples i with i % world == rank")
	fs.IntVar(&s.World, "world", s.World, "`number` of compute agents sharing the dataset")
	fs.BoolVar(&s.WholeBudget, "whole-budget", s.WholeBudget, "plan for each storage agent's whole CPU budget, as if this job were alone there (the behaviour before shares, to compare with); default: plan for this job's share, which the storage agent tells it")
	fs.StringVar(&s.Job, "job", s.Job, "this training job's `name` to the storage agents, which divide their CPU among the jobs they serve (storage-agent --job-weights) and tell each its share, which the policy plans for; every rank of a job sends the same name (default: run- and a hash of --seed, --first-epoch, --world and the pipeline)")
	fs.IntVar(&s.Window, "window", s.Window, "requests in flight per storage agent (`count`) on a short link; each epoch adds enough for twice the measured bandwidth x round trip (at most 16384), within --window-bytes")
	fs.Int64Var(&s.WindowBytes, "window-bytes", s.WindowBytes, "estimated response `bytes` in flight per storage agent: the hard bound, also of the window that grows by bandwidth x round trip")
	fs.IntVar(&s.Conns, "conns", s.Conns, fmt.Sprintf("TCP `connections` per storage agent that each epoch's fetch streams and window are spread over (1 to %d): a lossy long link holds one loss-based (cubic) connection far below its rate; 0: auto: 1 to a storage agent that sends by bbr (its Info says), else from the link's rate and the round trip and loss last measured (stage 1, then each epoch; until the loss is measured, as if the path lost 0.1%%: 1 under 10 ms, several on a longer one; then never fewer than an epoch that filled the link used)", computeagent.MaxConns))
	fs.IntVar(&s.RecvWindow, "recv-window", s.RecvWindow, "gRPC flow-control window in `bytes` a storage agent may send ahead on a stream (twice that per connection): what keeps the link busy while a CPU limit throttles the storage agent; a stream carries at most this per round trip, so it must cover the link's bandwidth x round trip (an epoch warns when the measured product is more); 0 leaves grpc's own, sized from a round trip")
	fs.StringVar(&s.TCPCongestion, "tcp-congestion", s.TCPCongestion, tcpinfo.FlagUsage)
	fs.IntVar(&s.Workers, "workers", s.Workers, "finishing `workers` running ops[k:n] (default: number of CPUs)")
	fs.IntVar(&s.Queue, "queue", s.Queue, "shared queue capacity in `batches`")
	fs.IntVar(&s.Batch, "batch", s.Batch, "batch `size`")
	fs.StringVar(&s.GPU, "gpu", s.GPU, "GPU `consumer`: sim:alexnet-v100, sim:resnet50-v100, sim:RATE (img/s) or sim:step=DURATION")
	fs.StringVar(&s.TrainerSocket, "trainer-socket", s.TrainerSocket, "serve the node's trainer processes on this Unix socket `path` (python/sophon's Loader) instead of the simulated --gpu; the agent then runs the epochs the local ranks ask for until stopped")
	fs.StringVar(&s.DType, "dtype", s.DType, "what trainer slots hold: uint8 (NHWC crops; the client applies to_tensor and normalize on its device) or float32 (NCHW, the whole pipeline)")
	fs.BoolVar(&s.DropLast, "drop-last", s.DropLast, "every rank gets only full batches (default: each rank is padded by repeats of its own samples to the same count, as DistributedSampler; reports count them in padded)")
	fs.IntVar(&s.Slots, "slots", s.Slots, "batch `slots` per trainer rank in its shared-memory ring")
	fs.Int64Var(&s.RingBytes, "ring-bytes", s.RingBytes, "shared-memory `bytes` for the rings of all local ranks; slots per rank are lowered to fit")
	fs.DurationVar(&s.Progress, "progress", s.Progress, "`interval` of the progress log line during an epoch (0: none)")
	fs.BoolVar(&s.StrictOrder, "strict-order", s.StrictOrder, "form batches in the epoch's permutation order (default: completion order)")
	fs.BoolVar(&s.FetchOnly, "fetch-only", s.FetchOnly, "test the link: fetch and validate every sample at its split, but do not finish or consume them")
	fs.IntVar(&s.GCPercent, "gc-percent", s.GCPercent, "Go GC target `percent` (GOGC); -1 means 100, or 400 with --fetch-only; ignored when GOGC is set")
	fs.StringVar(&s.OnError, "on-error", s.OnError, "bad samples: fail (the epoch fails naming the sample) or skip (reported, not delivered)")
	s.Settings.Register(fs)
	fs.StringVar(&s.Codec, "codec", s.Codec, "`codec` for intermediates on the wire: none, zstd or s2")
	fs.StringVar(&s.Placement, "placement", s.Placement, "which storage agent serves each sample: pull (every agent pulls the next sample it holds from one shared schedule, so faster agents take more; under --policy with several agents, each takes the samples the plan gave it first, then helps with the rest) or round-robin (sample p goes to the (p mod k)-th of its k holders, whatever their speed: a baseline)")
	fs.BoolVar(&s.WorkConserving, "work-conserving", s.WorkConserving, "let storage agents answer an offload request raw when their CPU cannot finish it before the raw bytes would have crossed the link (=false: run the plan's splits however long the storage agents take)")
	fs.IntVar(&s.Retries, "retries", s.Retries, "deprecated for stream failures (see --retry-budget); now only how often one sample is re-requested after a storage agent's queue deadline")
	fs.DurationVar(&s.RetryBudget, "retry-budget", s.RetryBudget, "`time` a storage agent may make no progress (restart, outage) before it is given up for the epoch; failed streams, Info and Catalog are retried with exponential back-off and jitter meanwhile, and the epoch fails only when no storage agent is left")
	fs.DurationVar(&s.StallTimeout, "stall-timeout", s.StallTimeout, "progress `deadline` of a fetch stream with requests outstanding: past it the stream is declared stalled, its requests are hedged to the other storage agents and it is retried later (default 0: adaptive, max(2s, 4 x the p99 silence between responses))")
	fs.StringVar(&s.StateDir, "state-dir", s.StateDir, "`directory` that makes the run resumable: after a crash (kill -9) a rerun with the same flags skips the completed epochs and delivers exactly the samples of the interrupted one not yet in the sample log (--samples-out, else DIR/samples); a directory of another run is refused")
	fs.StringVar(&s.CacheDir, "cache-dir", s.CacheDir, "the node's sample cache: a `directory` on a local disk or a tmpfs (created 0700, reused after a restart); with --policy the plan chooses which samples it holds (raw files for a random pipeline, finished outputs for a deterministic one such as imagenet-val), a plan FILE names them under \"cached\"; needs --cache-bytes")
	fs.Var(&s.CacheBytes, "cache-bytes", "the cache's budget in `bytes` (e.g. 512MiB, 2G; "+bytesize.Units+"): the planner plans residency under it")
	fs.StringVar(&s.CachePolicy, "cache-policy", s.CachePolicy, "what the cache holds: planned (the plan's resident samples, fixed across epochs; default) or lru (every raw fetch through an LRU of raw files: the baseline of a plain file cache)")
	fs.StringVar(&s.CacheKeyFile, "cache-key-file", s.CacheKeyFile, "`file` holding the key the cache's entries are signed with (32 bytes, 0600, made when missing), outside --cache-dir so that whoever can write the cache cannot forge an entry (default: the cache directory's path + \".key\")")
	fs.StringVar(&s.ReportPath, "report", s.ReportPath, "append one JSON report line per epoch to `file` (default: none)")
	fs.StringVar(&s.SamplesOut, "samples-out", s.SamplesOut, "append one line per delivered sample to `file`: epoch, sample id and the sha256 of its tensor (of its wire form with --fetch-only), to check exactly-once delivery and placement invariance; written with one write per batch as the consumer takes it, so it is complete when an epoch fails or the agent is killed")
	return fs
}

// parse reads the command line and the config file it names.
func parse(args []string, out io.Writer) (settings, error) {
	return cli.Parse(args, defaults, func(s *settings) *flag.FlagSet { return flagSet(s, out) },
		func(s *settings) string { return s.Config })
}

func (s settings) agentConfig(log zerolog.Logger) (computeagent.Config, error) {
	c := computeagent.DefaultConfig()
	p, err := ops.LoadPipeline(s.Pipeline)
	if err != nil {
		return c, err
	}
	plan, err := planner.ParsePlan(s.Plan, p)
	if err != nil {
		return c, err
	}
	if s.Policy != "" && s.Plan == "nooff" {
		plan = nil // the default plan gives way to the policy
	}
	codec, err := wireform.ParseCodec(s.Codec)
	if err != nil {
		return c, err
	}
	sim, err := computeagent.ParseGPU(s.GPU, nil)
	if err != nil {
		return c, err
	}
	if len(s.Storage) > 0 {
		c.Discovery = computeagent.Static(s.Storage...)
	}
	c.RunOptions = s.RunOptions
	c.Name = s.Name
	c.Gossip = s.GossipSettings()
	c.Cluster = s.Cluster
	c.Insecure = s.Insecure
	c.Version = version
	c.Pipeline = p
	c.Plan = plan
	c.Out = os.Stdout
	c.Codec = codec
	c.StrictOffload = !s.WorkConserving
	c.NoResplit = !s.Resplit
	if s.TrainerSocket == "" {
		c.Consumer = sim // with trainers the GPU's rate is theirs, unknown to stage 1
	}
	c.Trainer = computeagent.TrainerConfig{Socket: s.TrainerSocket, DType: s.DType, DropLast: s.DropLast, Slots: s.Slots, RingBytes: s.RingBytes}
	c.MetricsAddr = s.Metrics
	c.TLS = s.TLSFiles()
	c.Logger = log
	return c, nil
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "certs" {
		return cli.Certs("compute-agent", args[1:], os.Stdout)
	}
	s, log, stopProfile, code, ok := cli.Start("compute-agent", args, parse, os.Stderr)
	if !ok {
		return code
	}
	defer stopProfile()
	// The signals are caught from the start, as the storage agent does:
	// New loads NVML, and a signal then ends Run at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli.SetGCPercent(gcPercent(s))
	cfg, err := s.agentConfig(log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compute-agent:", err)
		return 2
	}
	a, err := computeagent.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compute-agent:", err)
		return 2
	}
	defer a.Close()
	_, err = a.Run(ctx)
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if ctx.Err() != nil {
		// SIGINT or SIGTERM: a requested, clean shutdown (the interrupted
		// epoch's report says so; --state-dir resumes it).
		log.Info().Err(err).Msg("stopped by signal")
		return 0
	}
	if err != nil {
		log.Error().Err(err).Msg("stopped")
		return 1
	}
	return 0
}

// gcPercent is the GC target: Go's default while training, where the
// window and the batch queue keep a large live heap, and 400 for a link
// test, which keeps nothing but the window and so would otherwise collect
// every few megabytes of responses (docs/results.md, "Figures behind the
// defaults").
func gcPercent(s settings) int {
	switch {
	case s.GCPercent >= 0:
		return s.GCPercent
	case s.FetchOnly:
		return 400
	}
	return 100
}

func main() { os.Exit(run(os.Args[1:])) }
