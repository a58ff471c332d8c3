package computeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/internal/membership"
	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Defaults for the zero values of [Config].
const (
	DefaultWindow      = 64
	DefaultWindowBytes = 64 << 20
	// DefaultRecvWindow lets a storage agent run 8 MiB ahead on each
	// stream: while a CPU limit throttles it (up to the rest of a 100 ms
	// CFS period) only what it has already sent can cross the link, and
	// grpc's own window, sized from a round trip, holds too little to
	// cover the throttled time (docs/architecture.md, "CPU limits on the
	// storage node").
	DefaultRecvWindow  = 8 << 20
	DefaultQueue       = 4
	DefaultBatch       = 128
	DefaultEpochs      = 1
	DefaultRetries     = 5
	DefaultRetryBudget = 60 * time.Second

	DefaultProfileBudget   = 2 * time.Second
	DefaultReplanThreshold = 0.2
)

// Placements: which storage agent serves which position of an epoch.
const (
	// PlacementPull lets every fetcher pull the next position its storage
	// agent holds from the shared schedule: faster agents take more. Under
	// a cluster plan (a policy run over several agents) each fetcher takes
	// the positions the plan gave its agent first and then helps with the
	// others' (schedule.Placement.Prefer).
	PlacementPull = "pull"
	// PlacementRoundRobin binds position p to the (p mod k)-th of the k
	// agents holding its sample, whatever their speed (the baseline that
	// ignores rates); a position falls back to its other holders only
	// once its bound agent is given up.
	PlacementRoundRobin = "round-robin"
)

// OnError policies: what a bad sample does to the epoch.
const (
	// OnErrorFail fails the epoch with an error naming the sample.
	OnErrorFail = "fail"
	// OnErrorSkip records the sample in the report, does not deliver it and
	// goes on.
	OnErrorSkip = "skip"
)

// Config configures an [Agent]. Start from [DefaultConfig]; New fills in
// the zero values as documented and refuses invalid ones.
type Config struct {
	// Discovery finds the storage agents. Nil means gossip: Run joins the
	// cluster with Gossip (Gossip.Bind required then) and uses
	// MembershipDiscovery.
	Discovery Discovery
	// Name is this node's name in the cluster. Empty means membership's
	// default (hostname-pid).
	Name string
	// Gossip is where the agent gossips, whom it joins and the gossip key
	// (membership.Gossip), used only when Discovery is nil: then
	// Gossip.Bind is required, and a key (Gossip.Key or Gossip.KeyFile)
	// unless Insecure. The label is Cluster. The zero value means no
	// gossip, which needs a Discovery.
	Gossip membership.Gossip
	// Cluster is the cluster's name, held here once for both its uses: the
	// gossip label, and the cluster every storage agent's certificate must
	// name. Empty means tlsconf.DefaultCluster.
	Cluster string
	// Insecure is the one switch (--insecure) for both of the agent's
	// protections, held here because it spans Gossip and TLS: with it the
	// agent dials storage agents in plaintext when TLS is empty and
	// gossips unencrypted when no key is given, and logs a warning when
	// Run starts. False requires TLS files and, with gossip discovery, a
	// gossip key. For tests and a first try-out only.
	Insecure bool
	// RunOptions are what the run does: its epochs, windows, workers,
	// policy and files, the settings the command line sets one flag each.
	RunOptions
	// Version is announced to the cluster. Empty announces none.
	Version string
	// Pipeline is the online preprocessing pipeline; it must end in a
	// tensor. Required.
	Pipeline *ops.Pipeline
	// Plan maps each sample to its split k (see planner.NoOff, AllOff,
	// ResizeOff, ParsePlan). Nil means NoOff (k = 0).
	Plan *policy.Plan

	// Out receives the human-readable stage 1 decision. Nil means it is
	// only logged.
	Out io.Writer

	// Codec asks the storage agents to compress intermediates. Zero means
	// none.
	Codec wireform.Codec
	// StrictOffload turns work-conserving offload off: by default every
	// offload request lets the storage agent answer raw when its CPU budget
	// cannot finish it before the raw bytes would have crossed the link
	// (FetchRequest.fallback), which keeps an epoch from becoming slower
	// than No-Off when the storage CPU shrinks. With StrictOffload the
	// agent runs exactly the plan's splits, however long the storage
	// agents take.
	StrictOffload bool
	// NoResplit keeps every planned epoch on one plan, re-planned between
	// epochs only: by default a planned epoch re-splits its remaining
	// positions when its measured link rate moves (ResplitThreshold).
	NoResplit bool
	// MaxPayload bounds a decoded response's payload (wireform.Limits).
	// Zero means wireform.DefaultMaxPayload.
	MaxPayload int

	// Consumer receives the batches. Nil means a consumer that discards
	// them at once. Unused in trainer mode.
	Consumer Consumer
	// Trainer, when Trainer.Socket is set, serves the node's trainer
	// processes instead of Consumer (docs/handoff.md): Run reads the
	// catalog, listens on the socket and runs the epochs the local ranks
	// ask for until ctx ends; Epochs and FirstEpoch are then unused.
	Trainer TrainerConfig
	// GPU samples the GPU's utilisation during each epoch. Nil means
	// NVML where the binary is built with cgo and a driver is present;
	// otherwise the report says why there is none.
	GPU GPUMonitor

	// MetricsAddr is the HTTP address of /metrics and /healthz. Empty means
	// no metrics listener.
	MetricsAddr string

	// OnSample, when set, is called once per delivered sample, after its
	// batch was consumed, with the sha256 of its tensor's float32 bytes
	// (little-endian). It is called from one goroutine.
	OnSample func(epoch, sample uint64, sha [32]byte)

	// TLS holds the client certificate (naming a compute agent of Cluster),
	// key and CA; the agent dials with mutual TLS 1.3 and accepts a storage
	// agent only when its certificate is signed by the CA, valid for the host
	// of its address, names a storage agent of Cluster and, when gossip
	// found the agent, names the member gossip announced. All empty means
	// no TLS, which is refused unless Insecure.
	TLS tlsconf.Files
	// Logger receives the agent's logs. The zero value discards them.
	Logger zerolog.Logger
}

// RunOptions are the part of a Config that the compute-agent command sets
// one flag each: the yaml tags are the flags' names and the config file's
// keys, so the command binds its flags to RunOptions and hands them over
// whole.
type RunOptions struct {
	// MinStorage is how many storage agents gossip discovery waits for
	// before each epoch. Zero means 1.
	MinStorage int `yaml:"min-storage"`
	// Policy, when set, plans the splits itself (see planner.go): one of
	// nooff, alloff, resizeoff, fastflow, sophon or optimal. Run then
	// measures the resources first (stage 1), profiles every sample in the
	// first epoch under No-Off when the link is the bottleneck (stage 2),
	// plans with the policy and runs the later epochs with the plan, each
	// request's codec chosen by the plan (zstd or none; Codec is ignored).
	// Empty means Plan decides. With a Policy, a static Plan (nooff, alloff,
	// resizeoff) is ignored and a plan file is refused; Policy and
	// FetchOnly are mutually exclusive.
	Policy string `yaml:"policy"`
	// ProfilePath is where the stage 2 profile is kept: a valid profile
	// there for this dataset and pipeline is reused (stage 2 is skipped),
	// and a new one is saved there. Empty means none is read or written.
	ProfilePath string `yaml:"profile"`
	// ProfileBudget bounds each stage 1 measurement (link, compute CPU).
	// Zero means 2 s.
	ProfileBudget time.Duration `yaml:"profile-budget"`
	// ForceProfile, without a saved profile, records one (stage 2: a
	// No-Off first epoch) rather than planning from header estimates, and
	// does so even when stage 1 finds that the link does not bound the
	// epoch. False plans from the estimates (stage 2 only where the
	// catalog has no headers, and when the link bounds the epoch).
	ForceProfile bool `yaml:"force-profile"`
	// NoRefine keeps a run that plans from header estimates on the
	// estimate: the epochs' observations do not refine it (Planner.Learn),
	// so every epoch runs the plan from the estimate alone (to compare it
	// with a profiled plan). False refines.
	NoRefine bool `yaml:"no-refine"`
	// ReplanThreshold is the relative drift of a measured rate (link
	// bytes/s, storage CPU per offloaded sample) from the plan's assumption
	// that makes the agent re-plan for the next epoch. Zero means 0.2.
	ReplanThreshold float64 `yaml:"replan-threshold"`
	// ResplitThreshold and ResplitHold: a planned epoch whose measured
	// link rate moves by more than ResplitThreshold (a fraction) from the
	// second before's and its plan's for ResplitHold re-splits its
	// remaining positions
	// (planner.ResplitConfig; NoResplit turns it off). Zero means
	// planner.DefaultResplitThreshold and DefaultResplitHold.
	ResplitThreshold float64       `yaml:"resplit-threshold"`
	ResplitHold      time.Duration `yaml:"resplit-hold"`
	// Epochs is how many epochs Run runs. Zero means 1.
	Epochs int `yaml:"epochs"`
	// FirstEpoch is the number of the first epoch (seeds and order depend
	// on it). Zero means epoch 0.
	FirstEpoch uint64 `yaml:"first-epoch"`
	// Seed is the run seed: with the epoch it fixes the order and every
	// random draw of the pipeline. Zero is a seed like any other.
	Seed uint64 `yaml:"seed"`
	// Rank and World shard the catalog: this agent serves the samples i
	// with i % World == Rank. World zero means 1.
	Rank  int `yaml:"rank"`
	World int `yaml:"world"`
	// Job names this training job to the storage agents, which divide
	// their CPU budgets among the jobs they serve and tell each its share
	// (InfoResponse.share_cpus), which the planner plans for. Every rank
	// of one job must send the same name. Empty means "run-" and a hash of
	// the seed, first epoch, world and pipeline, which the ranks share.
	Job string `yaml:"job"`
	// WholeBudget plans for each storage agent's whole CPU budget
	// (InfoResponse.cpus) rather than this job's share of it (share_cpus),
	// as if the job were alone there: the behaviour before shares, kept
	// to compare with. The storage agent's fair queue still gives the job
	// only its share; the work-conserving fallback serves raw what that
	// share cannot.
	WholeBudget bool `yaml:"whole-budget"`
	// Window bounds requests in flight per storage agent (sent and not yet
	// handed to the shared queue) on a short link: each epoch adds enough
	// for twice the link's measured bandwidth x round trip, up to
	// linkwatch.MaxWindowCount and within WindowBytes (engine/link.go). Zero
	// means 64.
	Window int `yaml:"window"`
	// WindowBytes bounds the estimated response bytes of the requests in
	// flight per storage agent (see schedule.SizeModel). Zero means 64 MiB. A
	// single request larger than the bound is still sent when nothing else
	// is in flight.
	WindowBytes int64 `yaml:"window-bytes"`
	// Workers is the number of finishing workers running ops[k:n]. Zero
	// means runtime.NumCPU().
	Workers int `yaml:"workers"`
	// Queue is the capacity of the shared queue between the workers and
	// the batcher, in batches. Zero means 4.
	Queue int `yaml:"queue"`
	// Batch is the number of samples per batch; the last batch of an epoch
	// may be smaller. Zero means 128.
	Batch int `yaml:"batch"`
	// StrictOrder forms batches in the epoch's permutation order instead of
	// completion order, holding early arrivals in a reorder buffer: no
	// request goes out for a position Window x (storage agents) or more
	// past the first one not yet batched, which bounds that buffer. A slow
	// sample then holds back every batch behind it. Zero (false) means
	// completion order: a slow sample delays only its own batch.
	StrictOrder bool `yaml:"strict-order"`
	// FetchOnly tests the link: each sample is fetched at its planned split
	// and its wire form is validated (wireform.Check: header, lengths,
	// checksum), but ops[k:n] do not run and no batch reaches the
	// consumer. Reports count samples and bytes as usual; OnSample gets the
	// sha256 of the wire form. Zero (false) means normal training epochs.
	FetchOnly bool `yaml:"fetch-only"`
	// OnError is OnErrorFail or OnErrorSkip. Empty means OnErrorFail.
	OnError string `yaml:"on-error"`
	// Placement is PlacementPull or PlacementRoundRobin. Empty means
	// PlacementPull.
	Placement string `yaml:"placement"`
	// Retries is how many times one sample is re-requested after a storage
	// agent's queue deadline (ERROR_KIND_DEADLINE) before it counts as a bad
	// sample. Zero means 5. Stream failures are bounded by RetryBudget, not
	// by a count.
	Retries int `yaml:"retries"`
	// RetryBudget is how long a storage agent may make no progress (no
	// response accepted from it) before its fetcher gives up on it for the
	// epoch; the epoch fails only when every storage agent was given up.
	// It also bounds the retries of Info and Catalog at the start of an
	// epoch. Failed streams are retried with exponential back-off and
	// jitter meanwhile. Zero means 60 s.
	RetryBudget time.Duration `yaml:"retry-budget"`
	// StallTimeout is the progress deadline of a Fetch stream: a stream
	// with requests outstanding that receives nothing for this long is
	// declared stalled (a gray failure: a stopped process, a black-holed
	// link), its outstanding requests are hedged to the other storage
	// agents and it is cancelled and retried later within RetryBudget.
	// Zero means adaptive: max(2 s, 4 x the epoch's p99 response latency).
	StallTimeout time.Duration `yaml:"stall-timeout"`
	// StateDir, when set, makes the run resumable after a crash: the agent
	// keeps its run identity (run.json) and the completed epochs there, and
	// the sample journal (SamplesOut, or StateDir/samples when that is
	// empty) is read back on start, so a restarted agent skips the epochs
	// already complete and, in the interrupted one, delivers exactly the
	// samples not yet journaled. A journal of another run (seed, dataset,
	// pipeline, plan, rank, world) is refused. Not with Trainer or Policy.
	// Empty means no state: every run starts afresh.
	StateDir string `yaml:"state-dir"`
	// SamplesOut, when set, receives one line per delivered sample,
	// "epoch sample sha256hex\n" (the OnSample hash), appended with one
	// write(2) per batch right after the consumer took the batch and
	// before the next batch is handed on. With StateDir it is the journal.
	// Empty means none (or StateDir/samples with StateDir).
	SamplesOut string `yaml:"samples-out"`
	// Conns is the TCP connections (gRPC ClientConns) to each storage
	// agent that an epoch spreads its Fetch streams and window over: a
	// lossy link with a long round trip holds one loss-based connection
	// far below its rate (linkwatch.AutoConns). At most linkwatch.MaxConns, and
	// no more than Window. Zero means auto: one to a storage agent that
	// sends by bbr (its Info's tcp_congestion; linkwatch.RateBased), else
	// linkwatch.AutoConns of the planner's link rate (or the storage agent's announced egress rate,
	// the higher) and the path's round trip and loss as last measured
	// (stage 1's probe, then each epoch's readings); before the loss is
	// measured, the first connection's round trip at linkwatch.PriorLoss
	// (linkwatch.FirstConns); one on a path without loss, but never fewer
	// than the last epoch the link held used. Info, the catalog and stage
	// 1's storage probe use the first connection; its link probe, all.
	Conns int `yaml:"conns"`
	// RecvWindow is the gRPC flow-control window, in bytes, that each
	// stream from a storage agent may send ahead of what the agent has
	// read; a connection's is twice that. Zero leaves grpc's own, which
	// it sizes from a round trip's bytes; DefaultConfig sets
	// DefaultRecvWindow. Else MinRecvWindow to MaxRecvWindow.
	RecvWindow int `yaml:"recv-window"`
	// TCPCongestion is the congestion control (TCP_CONGESTION) of every
	// connection to a storage agent; New refuses one the kernel lacks.
	// Empty keeps the host's default (tcpinfo.FlagUsage says why).
	TCPCongestion string `yaml:"tcp-congestion"`
	// Progress is the interval of the progress log line during an epoch.
	// Zero means none.
	Progress time.Duration `yaml:"progress"`
	// ReportPath, when set, receives one JSON line per epoch (JSON Lines),
	// appended. Empty means no file.
	ReportPath string `yaml:"report"`
	// Settings are the limits of every pipeline run on the agent (the
	// finishing workers, the raw refetch of a failed cut, stage 1's
	// measurement): the storage agent's, with its flags and defaults
	// (--max-pixels, --max-scans, --decode-memory, --max-output-bytes,
	// --op-timeout; docs/reliability.md). A sample they refuse fails with
	// TOO_LARGE or DEADLINE like any bad sample (OnError). Zero fields
	// mean oplimits.Default's values.
	oplimits.Settings `yaml:",inline"`
	// CacheDir is the node's sample cache (package cache): a directory
	// on a local disk or a tmpfs, created 0700, shared by every epoch and
	// local rank this agent serves and reused after a restart. Empty
	// means no cache.
	CacheDir string `yaml:"cache-dir"`
	// CacheBytes is the cache's budget (its entries' total size); with
	// the planned policy the planner plans residency under it
	// (policy.Resources.CacheBytes). Required with CacheDir.
	CacheBytes cache.Size `yaml:"cache-bytes"`
	// CachePolicy is cache.PolicyPlanned (the samples the plan marks
	// resident, policy.Plan.Cached, fixed across epochs) or
	// cache.PolicyLRU (every raw fetch through an LRU of raw files: the
	// baseline). Empty means planned.
	CachePolicy string `yaml:"cache-policy"`
	// CacheKeyFile holds the key the cache's entries are authenticated
	// under (cache.KeySize bytes, 0600, made when missing); it must lie
	// outside CacheDir. Empty means CacheDir + ".key" (cache.DefaultKeyFile).
	CacheKeyFile string `yaml:"cache-key-file"`
}

// DefaultConfig returns a Config with every default spelled out. The caller
// still sets Discovery (or Gossip) and Pipeline, and TLS (or Insecure).
// [New] validates it and fills in what is left zero.
func DefaultConfig() Config {
	return Config{
		Cluster: tlsconf.DefaultCluster,
		RunOptions: RunOptions{
			Epochs:      DefaultEpochs,
			World:       1,
			Window:      DefaultWindow,
			WindowBytes: DefaultWindowBytes,
			Workers:     runtime.NumCPU(),
			Queue:       DefaultQueue,
			Batch:       DefaultBatch,
			OnError:     OnErrorFail,
			Retries:     DefaultRetries,
			RetryBudget: DefaultRetryBudget,
			RecvWindow:  DefaultRecvWindow,
			Settings:    oplimits.Default(),
		},
	}
}

// Knobs are the agent's test hooks, apart from its Config (as CockroachDB
// keeps its TestingKnobs): only tests set them, through [NewWithKnobs].
// The zero Knobs are production's.
type Knobs struct {
	// GossipTransport replaces memberlist's network transport (tests pass
	// one from memberlist.MockNetwork); Config.Gossip.Bind must still be
	// set, but is not bound. Nil means UDP/TCP on Config.Gossip.Bind.
	GossipTransport memberlist.Transport
	// GossipTune adjusts memberlist's timing (tests pass
	// membership.FastTiming). Nil keeps the LAN preset.
	GossipTune func(*memberlist.Config)
	// Dial opens network connections to storage agents. Nil means a
	// net.Dialer (TCP).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Clock measures and sleeps. Nil means the system clock.
	Clock Clock
	// CacheBuild names the op library and codec build the cache keys
	// finished outputs by (cache.Options.Build). Empty means the running
	// binary's (cacheBuild).
	CacheBuild string
}

// withDefaults returns k with its zero fields filled in.
func (k Knobs) withDefaults() Knobs {
	if k.Clock == nil {
		k.Clock = SystemClock()
	}
	if k.Dial == nil {
		var d net.Dialer
		k.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	return k
}

// runConfig is what an [Agent] runs with: its Config with the defaults
// filled in, and its Knobs with theirs.
type runConfig struct {
	Config
	Knobs
}

// Defaults of [TrainerConfig].
const (
	DefaultSlots     = 3
	DefaultRingBytes = 1 << 30
)

// TrainerConfig makes the agent serve the trainer processes of its node
// (docs/handoff.md) instead of a simulated consumer.
type TrainerConfig struct {
	// Socket is the Unix socket trainers connect to. Empty means no
	// trainers: batches go to Config.Consumer.
	Socket string
	// DType is what a slot holds: "uint8" (NHWC; the pipeline stops before
	// its trailing to_tensor and normalize, which the client applies on
	// the trainer's device) or "float32" (NCHW, the whole pipeline). Empty
	// means uint8.
	DType string
	// DropLast keeps only full batches; otherwise each rank is padded by
	// repeats to the same count (RankOrder).
	DropLast bool
	// Slots is the number of batch slots per rank. Zero means 3.
	Slots int
	// RingBytes bounds the rings of all local ranks together; slots per
	// rank are lowered to fit. Zero means 1 GiB.
	RingBytes int64
}

// MaxConns bounds Config.Conns.
const MaxConns = linkwatch.MaxConns

// Bounds of Config.RecvWindow: grpc ignores windows under 64 KiB, and a
// connection's (twice the stream's) must fit an int32.
const (
	MinRecvWindow = 64 << 10
	MaxRecvWindow = 256 << 20
)

// ErrConfig marks an invalid configuration.
var ErrConfig = errors.New("computeagent: bad config")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
}

// withDefaults validates c and returns it with its zero fields filled in,
// in steps.
func (c Config) withDefaults() (Config, error) {
	for _, step := range []func() error{c.checkInputs, c.planDefaults, c.counts, c.trainerDefaults, c.checkTLS, c.checkCache} {
		if err := step(); err != nil {
			return c, err
		}
	}
	if c.Consumer == nil {
		c.Consumer = Discard{}
	}
	return c, nil
}

// checkCache checks the cache's settings.
func (c *Config) checkCache() error {
	switch {
	case c.CacheDir == "" && (c.CacheBytes != 0 || c.CachePolicy != "" || c.CacheKeyFile != ""):
		return configErr("--cache-bytes, --cache-policy and --cache-key-file need --cache-dir")
	case c.Policy == policy.NameLRU && (c.CacheDir == "" || c.CachePolicy != cache.PolicyLRU):
		return configErr("--policy %s plans for an LRU cache of raw files: it needs --cache-dir, --cache-bytes and --cache-policy %s", policy.NameLRU, cache.PolicyLRU)
	case c.CacheDir == "":
		return nil
	case c.CacheBytes <= 0:
		return configErr("--cache-dir %s needs a budget (--cache-bytes)", c.CacheDir)
	case c.CachePolicy != "" && c.CachePolicy != cache.PolicyPlanned && c.CachePolicy != cache.PolicyLRU:
		return configErr("--cache-policy %q: want %s or %s", c.CachePolicy, cache.PolicyPlanned, cache.PolicyLRU)
	}
	return nil
}

// checkInputs checks discovery, the pipeline and the policy, the
// inputs without defaults.
func (c *Config) checkInputs() error {
	if c.Discovery == nil && c.Gossip.Bind == "" {
		return configErr("no discovery: give storage addresses or a gossip address")
	}
	if c.Cluster == "" {
		c.Cluster = tlsconf.DefaultCluster
	}
	if c.Discovery == nil || c.Gossip.Key != "" || c.Gossip.KeyFile != "" {
		if err := c.Gossip.Check(c.Insecure); err != nil {
			return configErr("%v", err)
		}
	}
	if c.Pipeline == nil {
		return configErr("no pipeline")
	}
	n := c.Pipeline.Len()
	if c.Pipeline.KindAt(n) != ops.KindTensor {
		return configErr("pipeline %s ends in %s, want tensor", c.Pipeline.ID(), c.Pipeline.KindAt(n))
	}
	if c.Policy != "" {
		if !slices.Contains(Policies, c.Policy) {
			return configErr("policy %q: want one of %s", c.Policy, strings.Join(Policies, ", "))
		}
		if c.Plan != nil && !planner.IsStatic(c.Plan) {
			return configErr("policy %s and plan %s: give one or the other", c.Policy, c.Plan.Policy)
		}
		if c.FetchOnly {
			return configErr("policy %s needs training epochs, not fetch-only", c.Policy)
		}
	}
	return nil
}

// planDefaults fills and checks the planner's settings and the plan.
func (c *Config) planDefaults() error {
	if c.ProfileBudget == 0 {
		c.ProfileBudget = DefaultProfileBudget
	}
	if c.ReplanThreshold == 0 {
		c.ReplanThreshold = DefaultReplanThreshold
	}
	if c.ResplitThreshold < 0 || c.ResplitThreshold >= 1 || c.ResplitHold < 0 {
		return configErr("resplit threshold %v (want a fraction in [0, 1)) and hold %v (want at least 0)", c.ResplitThreshold, c.ResplitHold)
	}
	if c.ProfileBudget < 0 || !(c.ReplanThreshold > 0) {
		return configErr("profile budget %v and replan threshold %v must be positive", c.ProfileBudget, c.ReplanThreshold)
	}
	if c.Plan == nil {
		c.Plan = planner.NoOff()
	}
	if err := asConfig(planner.CheckPlan(c.Plan, c.Pipeline)); err != nil {
		return err
	}
	return nil
}

// counts fills and checks the counts, sizes and modes.
func (c *Config) counts() error {
	if c.Epochs == 0 {
		c.Epochs = DefaultEpochs
	}
	if c.World == 0 {
		c.World = 1
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.WindowBytes == 0 {
		c.WindowBytes = DefaultWindowBytes
	}
	if c.Workers == 0 {
		c.Workers = runtime.NumCPU()
	}
	if c.Queue == 0 {
		c.Queue = DefaultQueue
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.OnError == "" {
		c.OnError = OnErrorFail
	}
	if c.Placement == "" {
		c.Placement = PlacementPull
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	lim, err := c.Settings.WithDefaults()
	if err != nil {
		return configErr("%v", err)
	}
	c.Settings = lim
	if c.RetryBudget == 0 {
		c.RetryBudget = DefaultRetryBudget
	}
	switch {
	case c.Epochs < 0:
		return configErr("epochs %d is negative", c.Epochs)
	case c.World < 1 || c.Rank < 0 || c.Rank >= c.World:
		return configErr("rank %d of world %d: want 0 <= rank < world", c.Rank, c.World)
	case c.Job != "" && dataplanepb.CheckJobName(c.Job) != nil:
		return configErr("job: %v", dataplanepb.CheckJobName(c.Job))
	case c.Window < 0:
		return configErr("window %d is negative", c.Window)
	case c.WindowBytes < 0:
		return configErr("window bytes %d is negative", c.WindowBytes)
	case c.Workers < 0:
		return configErr("workers %d is negative", c.Workers)
	case c.Queue < 0:
		return configErr("queue %d is negative", c.Queue)
	case c.Batch < 0:
		return configErr("batch %d is negative", c.Batch)
	case c.Retries < 0:
		return configErr("retries %d is negative", c.Retries)
	case c.RetryBudget < 0 || c.StallTimeout < 0:
		return configErr("retry budget %v and stall timeout %v must not be negative", c.RetryBudget, c.StallTimeout)
	case c.StateDir != "" && (c.Trainer.Socket != "" || c.Policy != ""):
		return configErr("state dir: resuming is for simulated-GPU runs without a policy (trainers resume from their own state)")
	case c.MaxPayload < 0:
		return configErr("max payload %d is negative", c.MaxPayload)
	case c.Conns < 0 || c.Conns > MaxConns:
		return configErr("conns %d: want 0 (auto) to %d", c.Conns, MaxConns)
	case c.RecvWindow != 0 && (c.RecvWindow < MinRecvWindow || c.RecvWindow > MaxRecvWindow):
		return configErr("receive window %d bytes: want 0 (grpc's own) or %d to %d", c.RecvWindow, MinRecvWindow, MaxRecvWindow)
	case tcpinfo.Check(c.TCPCongestion) != nil:
		return configErr("%v", tcpinfo.Check(c.TCPCongestion))
	case c.Codec > wireform.CodecS2:
		return configErr("unknown codec %d", c.Codec)
	case c.OnError != OnErrorFail && c.OnError != OnErrorSkip:
		return configErr("on-error %q: want %q or %q", c.OnError, OnErrorFail, OnErrorSkip)
	case c.Placement != PlacementPull && c.Placement != PlacementRoundRobin:
		return configErr("placement %q: want %q or %q", c.Placement, PlacementPull, PlacementRoundRobin)
	}
	return nil
}

// trainerDefaults fills and checks Config.Trainer in trainer mode.
func (c *Config) trainerDefaults() error {
	if c.Trainer.Socket != "" {
		t := &c.Trainer
		if t.Slots == 0 {
			t.Slots = DefaultSlots
		}
		if t.RingBytes == 0 {
			t.RingBytes = DefaultRingBytes
		}
		switch {
		case t.DType != "" && t.DType != "uint8" && t.DType != "float32":
			return configErr("dtype %q: want uint8 or float32", t.DType)
		case t.Slots < 1:
			return configErr("slots %d: want at least 1", t.Slots)
		case t.RingBytes < 0:
			return configErr("ring bytes %d is negative", t.RingBytes)
		case c.FetchOnly:
			return configErr("trainers need training epochs, not fetch-only")
		}
	}
	return nil
}

// checkTLS checks the TLS files, or that --insecure says to go without.
func (c *Config) checkTLS() error {
	if err := c.TLS.Validate(); err != nil {
		return configErr("%v", err)
	}
	if !c.TLS.Enabled() && !c.Insecure {
		return configErr("no TLS certificate: pass --tls-cert, --tls-key and --tls-ca " +
			"(make certs, or compute-agent certs --out DIR, makes a development CA and certificates), or --insecure")
	}
	return nil
}
