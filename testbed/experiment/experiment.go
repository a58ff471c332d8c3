// Package experiment runs `testbed run`: the storage agent and the compute
// agent as two emulated nodes on one machine, joined by a shaped link, each
// offloading policy for a few epochs, over a grid of link rates and storage
// CPU limits, and the results file, report and charts of package results.
//
// Each cell of the grid gets fresh nodes from package bed. As root
// (netns.Available) they are two network namespaces joined by a veth pair
// shaped with tc tbf at the cell's rate both ways, and the storage agent
// runs under a cgroup CPU quota of the cell's storage CPUs as well as its
// own --cpus budget, which it needs to size its worker pool and to report
// its cores. Without root both agents run on loopback behind an in-process
// token bucket (shape.Proxy) and only --cpus limits the storage agent;
// Results.Mode says which, and why.
//
// With Config.StorageNodes or Config.ComputeNodes above 1 a cell is a star
// of namespaces instead (netns.NewStar): N storage agents, each with its own
// name, shaped link and cgroup, all serving the dataset, and M compute agents
// run as ranks 0..M-1 of one world against all of them; an epoch takes as
// long as its slowest rank, and exactly-once is checked over all ranks
// together. Loopback gives each storage agent its own shaping proxy.
//
// Everything a cell starts is torn down when the cell ends, when it fails
// and when ctx ends (Ctrl-C): processes (killed with their process groups,
// and with this process through Pdeathsig), namespaces and cgroups
// (bed.Bed.Close). Their names start with netns.ProcessPrefix(), so
// Leftovers finds any.
package experiment

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sophon-dl/sophon/policy"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/cpuquota"
	"github.com/sophon-dl/sophon/internal/s3gw"
	"github.com/sophon-dl/sophon/testbed/bed"
	"github.com/sophon-dl/sophon/testbed/cgroup"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
	"github.com/sophon-dl/sophon/testbed/tensors"
	"github.com/sophon-dl/sophon/testbed/trainscript"
)

// Defaults of Config.
const (
	// DefaultRate is the link rate of a grid with none, in tc's syntax.
	DefaultRate     = "500mbit"
	DefaultCPUs     = 0.5
	DefaultEpochs   = 3
	DefaultPipeline = "imagenet-train"
	// DefaultGPURate is a simulated GPU fast enough never to bound an
	// epoch on a small machine, so that the link and the CPUs decide.
	DefaultGPURate = 100000
	storagePort    = "7070"
	peerPort       = "8080"
)

// Compute-agent placements (Config.Placements): PlacementPull is the
// shared schedule (faster storage agents take more; the compute agent's
// default), PlacementRoundRobin binds position p of the epoch to storage
// agent p mod N.
const (
	PlacementPull       = "pull"
	PlacementRoundRobin = "round-robin"
)

// Placements are the compute agent's --placement values.
var Placements = []string{PlacementPull, PlacementRoundRobin}

// Config.WorkConserving values.
const (
	WorkConservingOn   = "on"
	WorkConservingOff  = "off"
	WorkConservingBoth = "both"
)

// Errors.
var (
	// ErrConfig: the configuration is invalid.
	ErrConfig = errors.New("experiment: bad config")
)

// Mode selects how the two nodes are emulated.
type Mode string

// Modes: ModeAuto picks netns when available, else loopback.
const (
	ModeAuto     Mode = "auto"
	ModeNetns    Mode = results.ModeNetns
	ModeLoopback Mode = results.ModeLoopback
)

// Config describes an experiment. Zero fields take the defaults noted.
type Config struct {
	// Data is the dataset: a folder of JPEGs (ImageFolder layout or not)
	// or of WebDataset tar shards. DataKind and DataSeed describe it in the
	// report when the testbed generated it.
	Data     string
	DataKind string
	DataSeed uint64
	// S3Root, when set, makes the storage agents read Data from an S3
	// bucket instead of the folder: versitygw's POSIX gateway over S3Root
	// runs on each storage node (in its namespace, outside its CPU
	// limit, like a separate object store in the same rack), and the
	// agents get --data s3://BUCKET/PREFIX where Data is
	// S3Root/BUCKET/PREFIX. Empty: the folder.
	S3Root string
	// Out is the folder for results.json, the report, the charts and the
	// agents' logs and reports. Created if missing.
	Out string
	// Rates are the link rates of the grid. Empty means DefaultRate.
	Rates []shape.Rate
	// StorageCPUs are the storage agent's CPU limits of the grid, in cores
	// (fractions allowed). Empty means DefaultCPUs.
	StorageCPUs []float64
	// Policies run in each cell, in order; the first is the reference
	// for placement invariance. Empty means every compute-agent policy.
	// A policy with EstSuffix runs without a saved profile (see
	// policyRun.est).
	Policies []string
	// Peer adds the torchvision DataLoader row to each cell (skipped,
	// with the reason, where torchvision is missing). Python is its
	// interpreter; empty means /usr/bin/python3 when present, else python3.
	Peer   bool
	Python string
	// Train adds the trainer row (results.TrainerPolicy) to each cell,
	// after the policies, one per pipeline: the compute agent serving its trainer socket
	// (--trainer-socket, --strict-order, the cell's batch, uint8 slots)
	// and TrainScript training a small CNN through python/sophon's Loader,
	// both on the compute side, the agent fetching over the same link. It
	// also makes the peer row (with Peer) train the same CNN, seeded alike,
	// instead of feeding the simulated GPU. Skipped, with the reason, where
	// Python cannot import torch and numpy or the script is not found.
	Train bool
	// TrainPolicy is the trainer row's compute-agent plan: "nooff" (the
	// default: --plan nooff, no planning) or a policy of
	// policy.Names (--policy, reusing the experiment's profile), or one
	// with EstSuffix (--policy without a saved profile: planned from
	// header estimates).
	TrainPolicy string
	// TrainScript is python/examples/train_cnn.py. Empty means found in
	// the repository: next to Bin's parent (bin/../python/examples), then
	// in the working directory and its parents (trainscript.Find).
	TrainScript string
	// NumClasses is the CNN's classes. Zero means the dataset's (its class
	// folders), or 1000 where it cannot tell (tar shards).
	NumClasses int
	// Epochs per policy run. Zero means DefaultEpochs.
	Epochs int
	// Pipeline is a preset name. Empty means DefaultPipeline. With
	// Pipelines set it is ignored (and set to Pipelines[0]).
	Pipeline string
	// Pipelines, when set, are several presets run side by side on the
	// same data: in each cell every policy runs once per pipeline, all of
	// one pipeline's runs before the next's, as rows of one report
	// (Run.Pipeline). Each pipeline has its own profile (the first run of
	// each records it: profiles are per pipeline ID) and its own reference
	// tensors for the content check; a pipeline with encode_jpeg gets a
	// fidelity line against the first one without (Results.Fidelity). The
	// peer row runs the first pipeline; a trainer row runs for each, with
	// its own profile (trainerProfile). Empty means [Pipeline].
	Pipelines []string
	// GPURate is the simulated GPU's samples/s, for the agents and the
	// peer alike. Zero means DefaultGPURate.
	GPURate float64
	// Batch is the batch size. Zero means the compute agent's default.
	Batch int
	// Seed fixes the order and every random draw.
	Seed uint64
	// Mode: ModeAuto (zero), ModeNetns (fails without root) or
	// ModeLoopback.
	Mode Mode
	// Bin is the folder with the storage-agent and compute-agent binaries
	// (and testbed, for the peer's file server). Empty means the folder of
	// this executable, then $PATH.
	Bin string
	// Scale states how the emulation maps to the hardware it stands for;
	// it goes into the report.
	Scale string
	// ContendAt, when positive, contends for the storage agent's CPU in
	// each policy run (not the trainer's or the peer's): once the compute
	// agent has reported floor(ContendAt x Epochs) epochs (at once when
	// that is 0), `testbed hog` with ContendThreads busy threads spins in
	// the storage agent's cgroup, under its quota, until the run ends
	// (results.Contention). Zero means none; otherwise it is below 1 and
	// needs netns mode with cgroups and the testbed binary.
	ContendAt float64
	// ContendThreads is the hog's busy threads. Zero means 1.
	ContendThreads int
	// WorkConserving is WorkConservingOn (zero: no flag, the compute
	// agent's default), WorkConservingOff (every compute agent runs with
	// --work-conserving=false) or WorkConservingBoth (each policy but
	// nooff runs twice, the second as "<policy>-nowc" with
	// --work-conserving=false).
	WorkConserving string
	// Repeat runs each cell this many times in a row, each with fresh
	// namespaces, cgroups and agents; the profile is the experiment's
	// (the first run of the first repetition records it). Zero means 1.
	Repeat int
	// StorageNodes and ComputeNodes are each cell's storage agents and
	// compute agents (ranks of one world: --rank i --world M). Zero means
	// 1; 1 x 1 is the two-node link, exactly as without them. Contention
	// (ContendAt), the trainer row and the peer row need 1 x 1 (the last
	// two are skipped otherwise, with the reason).
	StorageNodes, ComputeNodes int
	// Jobs, above 1, makes the compute agents independent training jobs
	// rather than ranks of one: Jobs compute nodes (ComputeNodes must be 1
	// or Jobs), each agent with --job job<i> over the whole dataset, its
	// own report, profile and exactly-once and content check, all against
	// the cell's storage agents, whose --cpus (StorageCPUs) is the total
	// the jobs share (storage-agent --job-weights, or add
	// --job-shares=false to StorageFlags for jobs that plan as if alone).
	Jobs int
	// JobsWholeBudget, with Jobs, runs each policy a second time as
	// "<policy>-whole", every job with compute-agent --whole-budget:
	// planned as if it were alone on the storage agents (as before
	// shares), beside the run planned for its share.
	JobsWholeBudget bool
	// JobLinks, with Jobs, gives each job a link of its own: each compute
	// node's link shaped at the cell's rate, the storage link at Jobs
	// times it, so that the jobs share the storage agent's CPU and not a
	// link. It needs netns mode. False: the jobs share the storage link.
	JobLinks bool
	// StorageRates, when set, gives each storage link its own rate, one
	// per storage node, in place of the grid's Rates (which must then be
	// empty): the grid has one rate point, named by the rates joined with
	// "+" ("400mbit+100mbit").
	StorageRates []shape.Rate
	// Placements, when set, runs each policy once per placement, every
	// compute agent with --placement P: the run of PlacementPull keeps the
	// policy's name, the others are "<policy>-<placement>" (after "-nowc"
	// with WorkConservingBoth). Empty means one run per policy and no
	// --placement flag at all: the compute agent's default, and agents
	// without the flag still run.
	Placements []string
	// Reference, when set, is the --samples-out file of a 1 x 1 run with
	// the same dataset, seed, pipeline and epochs: every run's tensors are
	// compared with its, instead of with the experiment's first
	// exactly-once run's.
	Reference string
	// ComputeFlags and StorageFlags add flags to the agents' command lines.
	ComputeFlags, StorageFlags []string
	// Insecure runs the agents with --insecure. By default every cell makes
	// a fresh development CA, the agents' certificates and a gossip key
	// (testbed.AgentCerts), and the agents run with mutual TLS.
	Insecure bool
	// CacheBytes, when set, gives every compute agent a fresh cache of
	// this budget per run (--cache-dir, --cache-bytes): absolute ("64MiB")
	// or a percentage of the dataset's bytes ("25%"). It also allows the
	// PolicyLRU row. Empty means no cache.
	CacheBytes string
	// RTTs, Jitter and Loss give the two-node link round trips, a jitter
	// and a loss fraction in each direction, through netns's user-space
	// delay line (netns.Config's RTT, Jitter and Loss, seeded with Seed).
	// RTTs is a dimension of the grid, like Rates: each cell runs at one
	// of them, its name says which (cellDir), and with any of the three
	// set every cell, RTT 0 included, goes through the delay line, so
	// that the round trip is the one thing that differs between them.
	// They need netns mode and the two-node link. Empty and zero mean no
	// delay line (the veth pair).
	RTTs   []time.Duration
	Jitter time.Duration
	Loss   float64
	// CongestionControl, when set, is the TCP congestion control of
	// every node's namespace (net.ipv4.tcp_congestion_control, a
	// per-namespace sysctl: both agents' connections use it): cubic,
	// bbr, reno or another the kernel offers. It needs netns mode. Empty
	// means the host's default, which a new namespace takes; either way
	// each cell records what its nodes ran with.
	CongestionControl string
	// RateSchedule, when set, changes the link's rate within each policy
	// run's epochs after the first, at the steps' offsets from each
	// epoch's start (schedule.go). It needs netns mode, and one rate for
	// every storage link (not StorageRates). Nil means none.
	RateSchedule shape.Schedule
	// WANMTU is the delay line's MTU (netns.Config.MTU), with RTT, Jitter
	// or Loss only. Zero means netns.DefaultMTU.
	WANMTU int
	// Progress receives a progress line now and then. Nil means none.
	Progress io.Writer
	// ProgressEvery is the progress interval. Zero means 2 s.
	ProgressEvery time.Duration
	Log           zerolog.Logger
}

func (c *Config) defaults() error {
	if c.Data == "" {
		return fmt.Errorf("%w: no dataset", ErrConfig)
	}
	if c.Out == "" {
		return fmt.Errorf("%w: no output folder", ErrConfig)
	}
	if c.StorageNodes == 0 {
		c.StorageNodes = 1
	}
	if c.ComputeNodes == 0 {
		c.ComputeNodes = 1
	}
	if c.JobLinks && (c.Jobs < 2 || c.StorageNodes > 1 || len(c.StorageRates) > 0) {
		return fmt.Errorf("%w: job links give each of --jobs 2 or more a link of the grid's rate, against one storage node", ErrConfig)
	}
	if c.JobsWholeBudget && c.Jobs < 2 {
		return fmt.Errorf("%w: jobs-whole-budget compares jobs: it needs --jobs 2 or more", ErrConfig)
	}
	if c.Jobs > 1 {
		if c.ComputeNodes > 1 && c.ComputeNodes != c.Jobs {
			return fmt.Errorf("%w: %d jobs on %d compute nodes: want one node per job", ErrConfig, c.Jobs, c.ComputeNodes)
		}
		c.ComputeNodes = c.Jobs
	}
	if c.StorageNodes < 1 || c.ComputeNodes < 1 {
		return fmt.Errorf("%w: %d storage and %d compute nodes: want at least 1 of each", ErrConfig, c.StorageNodes, c.ComputeNodes)
	}
	switch {
	case len(c.StorageRates) > 0 && len(c.Rates) > 0:
		return fmt.Errorf("%w: storage rates and a grid of rates exclude each other", ErrConfig)
	case len(c.StorageRates) > 0 && len(c.StorageRates) != c.StorageNodes:
		return fmt.Errorf("%w: %d storage rates for %d storage nodes: want one per node", ErrConfig, len(c.StorageRates), c.StorageNodes)
	case len(c.StorageRates) == 0 && len(c.Rates) == 0:
		c.Rates = []shape.Rate{shape.MustParseRate(DefaultRate)}
	}
	for i, r := range c.Rates {
		if r.IsZero() {
			return fmt.Errorf("%w: rate %d of the grid is unset", ErrConfig, i+1)
		}
	}
	for i, r := range c.StorageRates {
		if r.IsZero() {
			return fmt.Errorf("%w: storage rate %d is unset", ErrConfig, i+1)
		}
	}
	for i, p := range c.Placements {
		if !slices.Contains(Placements, p) {
			return fmt.Errorf("%w: unknown placement %q (want %s)", ErrConfig, p, strings.Join(Placements, ", "))
		}
		if slices.Contains(c.Placements[:i], p) {
			return fmt.Errorf("%w: placement %q given twice", ErrConfig, p)
		}
	}
	if len(c.StorageCPUs) == 0 {
		c.StorageCPUs = []float64{DefaultCPUs}
	}
	for _, v := range c.StorageCPUs {
		if !(v >= cgroup.MinCPUs) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: storage cpus %v: want at least %v", ErrConfig, v, cgroup.MinCPUs)
		}
	}
	if len(c.Policies) == 0 {
		for _, p := range policy.Names {
			if p != PolicyLRU || c.CacheBytes != "" {
				c.Policies = append(c.Policies, p)
			}
		}
	}
	for _, p := range c.Policies {
		base, _ := splitEst(strings.TrimSuffix(p, NoResplitSuffix))
		if base == PolicyLRU && c.CacheBytes == "" {
			return fmt.Errorf("%w: policy %s is No-Off through an LRU cache: it needs --cache-bytes", ErrConfig, p)
		}
		if !slices.Contains(policy.Names, base) {
			return fmt.Errorf("%w: unknown policy %q (want %s, each optionally with %s)", ErrConfig, p, strings.Join(policy.Names, ", "), EstSuffix)
		}
	}
	if c.TrainPolicy == "" {
		c.TrainPolicy = "nooff"
	}
	if base, est := splitEst(c.TrainPolicy); !slices.Contains(policy.Names, base) || (est && base == "nooff") {
		return fmt.Errorf("%w: unknown train policy %q (want %s; but nooff, optionally with %s)", ErrConfig, c.TrainPolicy, strings.Join(policy.Names, ", "), EstSuffix)
	}
	if c.NumClasses < 0 {
		return fmt.Errorf("%w: num classes %d", ErrConfig, c.NumClasses)
	}
	if err := c.checkWAN(); err != nil {
		return err
	}
	if len(c.RateSchedule) > 0 && len(c.StorageRates) > 0 {
		return fmt.Errorf("%w: a rate schedule sets every storage link to one rate: not with storage rates of their own", ErrConfig)
	}
	if c.Epochs == 0 {
		c.Epochs = DefaultEpochs
	}
	if c.Epochs < 1 {
		return fmt.Errorf("%w: epochs %d", ErrConfig, c.Epochs)
	}
	if err := c.pipelines(); err != nil {
		return err
	}
	if c.GPURate == 0 {
		c.GPURate = DefaultGPURate
	}
	if !(c.GPURate > 0) {
		return fmt.Errorf("%w: gpu rate %v", ErrConfig, c.GPURate)
	}
	if c.Mode == "" {
		c.Mode = ModeAuto
	}
	switch c.Mode {
	case ModeAuto, ModeNetns, ModeLoopback:
	default:
		return fmt.Errorf("%w: mode %q (want auto, netns or loopback)", ErrConfig, c.Mode)
	}
	if c.Python == "" {
		c.Python = "python3"
		if _, err := os.Stat("/usr/bin/python3"); err == nil {
			c.Python = "/usr/bin/python3"
		}
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 2 * time.Second
	}
	if !(c.ContendAt >= 0 && c.ContendAt < 1) {
		return fmt.Errorf("%w: contend-at %v: want a fraction of the epochs in [0, 1)", ErrConfig, c.ContendAt)
	}
	if c.ContendThreads == 0 {
		c.ContendThreads = 1
	}
	if c.ContendThreads < 1 {
		return fmt.Errorf("%w: contend threads %d", ErrConfig, c.ContendThreads)
	}
	if c.ContendAt > 0 && (c.StorageNodes > 1 || c.ComputeNodes > 1) {
		return fmt.Errorf("%w: contend-at runs on the 1 x 1 topology only, not %d x %d", ErrConfig, c.StorageNodes, c.ComputeNodes)
	}
	if c.WorkConserving == "" {
		c.WorkConserving = WorkConservingOn
	}
	switch c.WorkConserving {
	case WorkConservingOn, WorkConservingOff, WorkConservingBoth:
	default:
		return fmt.Errorf("%w: work-conserving %q (want on, off or both)", ErrConfig, c.WorkConserving)
	}
	if c.Repeat == 0 {
		c.Repeat = 1
	}
	if c.Repeat < 1 {
		return fmt.Errorf("%w: repeat %d", ErrConfig, c.Repeat)
	}
	return nil
}

// pipelinesField is Results.Pipelines: the pipelines when several.
func pipelinesField(p []string) []string {
	if len(p) > 1 {
		return p
	}
	return nil
}

// pipelines resolves Pipeline and Pipelines: Pipelines non-empty, each
// once, and Pipeline its first.
func (c *Config) pipelines() error {
	if len(c.Pipelines) == 0 {
		if c.Pipeline == "" {
			c.Pipeline = DefaultPipeline
		}
		c.Pipelines = []string{c.Pipeline}
	}
	for i, p := range c.Pipelines {
		if p == "" {
			return fmt.Errorf("%w: pipeline %d of %d is empty", ErrConfig, i+1, len(c.Pipelines))
		}
		if slices.Contains(c.Pipelines[:i], p) {
			return fmt.Errorf("%w: pipeline %q given twice", ErrConfig, p)
		}
	}
	if len(c.Pipelines) > 1 && c.Reference != "" {
		return fmt.Errorf("%w: a reference's tensors are one pipeline's: with %d pipelines each is checked against its own first exactly-once run", ErrConfig, len(c.Pipelines))
	}
	c.Pipeline = c.Pipelines[0]
	return nil
}

// binaries are the programs the experiment runs.
type binaries struct{ storage, compute, testbed, s3gw, dir string }

func findBinaries(dir string) (binaries, error) {
	if dir == "" {
		if exe, err := os.Executable(); err == nil {
			dir = filepath.Dir(exe)
		}
	}
	find := func(name string) (string, error) {
		if dir != "" {
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return filepath.Abs(p)
			}
		}
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%w: %s not found in %q or $PATH (make build puts it in bin/)", ErrConfig, name, dir)
		}
		return filepath.Abs(p)
	}
	b := binaries{dir: dir}
	var err error
	if b.storage, err = find("storage-agent"); err != nil {
		return b, err
	}
	if b.compute, err = find("compute-agent"); err != nil {
		return b, err
	}
	b.testbed, _ = find("testbed") // only the peer needs it
	return b, nil
}

// Run runs the experiment and writes Out/results.json, Out/report.md and
// the charts. It returns the results even when a run failed (the run's
// Error says why); the error is for what stopped the whole experiment.
func Run(ctx context.Context, cfg Config) (*results.Results, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	bins, err := findBinaries(cfg.Bin)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	data, err := filepath.Abs(cfg.Data)
	if err != nil {
		return nil, err
	}
	cfg.Data = data
	ds, err := describeDataset(cfg.Data)
	if err != nil {
		return nil, err
	}
	ds.Kind, ds.Seed = cfg.DataKind, cfg.DataSeed
	if cfg.S3Root != "" {
		if ds.Source, err = bucketURL(cfg.S3Root, cfg.Data); err != nil {
			return nil, err
		}
		if bins.s3gw, err = s3gw.Find(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	var cacheBytes int64
	if cfg.CacheBytes != "" {
		if cacheBytes, err = ParseCacheBytes(cfg.CacheBytes, ds.Bytes); err != nil {
			return nil, err
		}
	}

	res := &results.Results{
		Version:   results.Version,
		Started:   time.Now().UTC(),
		Machine:   machine(),
		Dataset:   ds,
		Pipeline:  cfg.Pipeline,
		Pipelines: pipelinesField(cfg.Pipelines),
		GPU:       gpuFlag(cfg.GPURate),
		Epochs:    cfg.Epochs,
		Seed:      cfg.Seed,
		Scale:     cfg.Scale,

		WorkConserving: cfg.WorkConserving,
		CacheBytes:     cacheBytes,
	}
	if cfg.Repeat > 1 {
		res.Repeat = cfg.Repeat
	}
	if cfg.StorageNodes > 1 || cfg.ComputeNodes > 1 {
		res.StorageNodes, res.ComputeNodes = cfg.StorageNodes, cfg.ComputeNodes
	}
	if cfg.Jobs > 1 {
		res.Jobs, res.JobLinks = cfg.Jobs, cfg.JobLinks
	}
	res.Placements = cfg.Placements
	if cfg.ContendAt > 0 {
		res.ContendAt, res.ContendThreads = cfg.ContendAt, cfg.ContendThreads
	}
	res.Mode, res.ModeNote, err = pickMode(cfg.Mode, cfg.StorageNodes, cfg.ComputeNodes)
	if err != nil {
		return nil, err
	}
	if cfg.JobLinks {
		res.ModeNote = strings.Replace(res.ModeNote, "compute links unshaped", "each compute link shaped too (--job-links)", 1)
	}
	if w := cfg.wan(); w != nil {
		if res.Mode != results.ModeNetns {
			return nil, fmt.Errorf("%w: --rtt, --jitter and --loss need netns mode (root): the delay line runs between two namespaces (mode %s: %s)", ErrConfig, res.Mode, res.ModeNote)
		}
		res.ModeNote = wanNote(res.ModeNote, w, cfg.RTTs)
	}
	if cc := cfg.CongestionControl; cc != "" {
		if res.Mode != results.ModeNetns {
			return nil, fmt.Errorf("%w: --cc needs netns mode (root): it sets each node namespace's tcp_congestion_control (mode %s: %s)", ErrConfig, res.Mode, res.ModeNote)
		}
		res.CongestionControl = cc
	}
	if len(cfg.RateSchedule) > 0 {
		if res.Mode != results.ModeNetns {
			return nil, fmt.Errorf("%w: --rate-schedule needs netns mode (root): it changes tc's rate (mode %s: %s)", ErrConfig, res.Mode, res.ModeNote)
		}
		res.RateSchedule = cfg.RateSchedule.String()
	}
	cfg.Log.Info().Str("mode", res.Mode).Str("why", res.ModeNote).Msg("testbed")
	if res.Mode == results.ModeNetns && cgroup.Available() != nil {
		res.ModeNote += fmt.Sprintf("; no cgroup CPU controller (%v): the storage agent's --cpus budget alone limits it", cgroup.Available())
	}
	if cfg.ContendAt > 0 {
		switch {
		case res.Mode != results.ModeNetns:
			return nil, fmt.Errorf("%w: --contend-at needs netns mode (root): the hog shares the storage agent's cgroup", ErrConfig)
		case cgroup.Available() != nil:
			return nil, fmt.Errorf("%w: --contend-at needs the storage agent's cgroup: %v", ErrConfig, cgroup.Available())
		case bins.testbed == "":
			return nil, fmt.Errorf("%w: --contend-at needs the testbed binary (for testbed hog) next to the agents", ErrConfig)
		}
	}
	pin := pinning(runtime.NumCPU(), res.Mode, cfg.StorageNodes, cfg.StorageCPUs)
	res.Machine.Pinning = pin.Why
	// The machine's cores as this process may use them (its own cgroup's
	// quota and cpuset, in a container): what the nodes' quotas share.
	cores, _, _ := cpuquota.Cores(0)
	if grouped(res.Mode) {
		for _, c := range cfg.StorageCPUs {
			if _, err := bed.ComputeCPUs(cores, cfg.StorageNodes, c, pin, computeApart(cfg)); err != nil {
				return nil, fmt.Errorf("%w: --storage-cpus %g: %w", ErrConfig, c, err)
			}
		}
	}

	x := &experiment{cfg: cfg, bins: bins, res: res, pin: pin, cores: cores, ref: map[[2]uint64]string{},
		fidelityFrom: map[string]fidelitySource{}}
	if cfg.Reference != "" {
		ref, err := tensors.Read(cfg.Reference)
		if err != nil {
			return nil, fmt.Errorf("%w: reference: %w", ErrConfig, err)
		}
		if ref.Dups > 0 || len(ref.Got) == 0 {
			return nil, fmt.Errorf("%w: reference %s: %d samples, %d duplicates: want a 1 x 1 run's samples, each once per epoch", ErrConfig, cfg.Reference, len(ref.Got), ref.Dups)
		}
		x.ref, res.Reference = ref.Got, cfg.Reference
	}
	if cfg.Train {
		x.trainScript, x.trainErr = trainscript.Ready(cfg.Python, cfg.TrainScript, bins.dir)
		if x.trainErr != nil {
			cfg.Log.Warn().Err(x.trainErr).Msg("training rows skipped")
		}
	}
	for i := range cfg.Pipelines {
		os.Remove(x.pipeProfile(i)) // a fresh profile per experiment: the first run records it
	}
	x.usePipeline(0)
	if old, err := filepath.Glob(filepath.Join(cfg.Out, "profile-rank*.zst")); err == nil {
		for _, p := range old { // the ranks' of an N x M experiment
			os.Remove(p)
		}
	}
	if old, err := filepath.Glob(filepath.Join(cfg.Out, "profile-*-cpu*.zst")); err == nil {
		for _, p := range old { // and fresh measured resources per cell
			os.Remove(p)
		}
	}
	for i := range cfg.Pipelines {
		os.Remove(x.trainerProfile(i))
	}
	var runErr error
grid:
	for _, p := range cfg.points() {
		for _, cpus := range cfg.StorageCPUs {
			for rep := range cfg.Repeat {
				num := 0 // a grid run once numbers no repetition
				if cfg.Repeat > 1 {
					num = rep + 1
				}
				began, cpu0 := time.Now(), selfCPU()
				cell, err := x.cell(ctx, p, cpus, num)
				cell.Seconds, cell.TestbedCPUSeconds = time.Since(began).Seconds(), (selfCPU() - cpu0).Seconds()
				results.ScoreContention(&cell)
				res.Cells = append(res.Cells, cell)
				if err != nil {
					runErr = err
					break grid
				}
			}
		}
	}
	if runErr == nil {
		res.Fidelity = x.fidelity(ctx)
	}
	res.Repeatability = results.Repeatabilities(res)
	res.Finished = time.Now().UTC()
	if _, err := results.Write(cfg.Out, res); err != nil {
		return res, errors.Join(runErr, err)
	}
	if _, _, err := results.WriteReport(cfg.Out, res); err != nil {
		return res, errors.Join(runErr, err)
	}
	return res, runErr
}

// checkWAN validates RTT, Jitter and Loss.
func (c *Config) checkWAN() error {
	switch {
	case slices.ContainsFunc(c.RTTs, func(d time.Duration) bool { return d < 0 }) || c.Jitter < 0:
		return fmt.Errorf("%w: negative rtt or jitter", ErrConfig)
	case len(slices.Compact(slices.Sorted(slices.Values(c.RTTs)))) != len(c.RTTs):
		return fmt.Errorf("%w: rtts %v: one round trip given twice", ErrConfig, c.RTTs)
	case c.CongestionControl != "" && netns.CheckCongestion(c.CongestionControl) != nil:
		return fmt.Errorf("%w: %w", ErrConfig, netns.CheckCongestion(c.CongestionControl))
	case !(c.Loss >= 0 && c.Loss < 1):
		return fmt.Errorf("%w: loss %v: want a fraction in [0, 1)", ErrConfig, c.Loss)
	case c.WANMTU != 0 && c.wan() == nil:
		return fmt.Errorf("%w: an MTU for the delay line without --rtt, --jitter or --loss", ErrConfig)
	case c.WANMTU != 0 && (c.WANMTU < 576 || c.WANMTU > 65535):
		return fmt.Errorf("%w: delay line MTU %d: want 576 to 65535", ErrConfig, c.WANMTU)
	case c.wan() != nil && (c.StorageNodes > 1 || c.ComputeNodes > 1):
		return fmt.Errorf("%w: --rtt, --jitter and --loss are for the two-node link, not a star of %d x %d nodes", ErrConfig, c.StorageNodes, c.ComputeNodes)
	}
	return nil
}

// wan is the delay line that RTTs, Jitter and Loss ask for, at the
// grid's first round trip; nil when none is set.
func (c *Config) wan() *netns.WAN {
	if len(c.RTTs) == 0 && c.Jitter == 0 && c.Loss == 0 {
		return nil
	}
	mtu := c.WANMTU
	if mtu == 0 {
		mtu = netns.DefaultMTU
	}
	w := &netns.WAN{Jitter: c.Jitter, Loss: c.Loss, Seed: int64(c.Seed), MTU: mtu}
	if len(c.RTTs) > 0 {
		w.RTT = c.RTTs[0]
	}
	return w
}

// rtts is the grid's round trips: RTTs, or the one zero of a grid
// without (on the delay line with only jitter or loss, or on the veth
// pair).
func (c *Config) rtts() []time.Duration {
	if len(c.RTTs) == 0 {
		return []time.Duration{0}
	}
	return c.RTTs
}

// wanNote is the netns mode's note for a link on the delay line w: the
// report's mode line then says the round trip, jitter and loss. With
// several round trips (rtts) it names them all: each cell has one.
func wanNote(note string, w *netns.WAN, rtts []time.Duration) string {
	desc := w.String()
	if len(rtts) > 1 {
		names := make([]string, len(rtts))
		for i, d := range rtts {
			names[i] = rttName(d)
		}
		desc = strings.Replace(desc, "rtt "+w.RTT.String(), "rtt "+strings.Join(names, ", ")+" (one per cell)", 1)
	}
	return strings.Replace(note, "joined by a veth pair",
		"joined by a WAN link, "+desc+": a TUN device in each and a user-space delay line between them", 1)
}

// rttName names a round trip in cell names and notes: "20ms", and "0"
// for none.
func rttName(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.String()
}

// pickMode resolves ModeAuto for storage x compute nodes.
func pickMode(m Mode, storage, compute int) (mode, note string, err error) {
	nsErr := netns.Available()
	loop := "both agents on 127.0.0.1 behind an in-process token bucket (shape.Proxy); the storage agent limited by its --cpus budget only"
	ns := "two network namespaces joined by a veth pair, tc tbf both ways; storage agent under a cgroup CPU quota"
	if storage > 1 || compute > 1 {
		loop = fmt.Sprintf("%d storage and %d compute agents on 127.0.0.1, each storage agent behind its own in-process token bucket (shape.Proxy); the storage agents limited by their --cpus budgets only", storage, compute)
		ns = fmt.Sprintf("%d storage and %d compute network namespaces joined by a bridge in a hub namespace, each storage link shaped with tc tbf both ways, compute links unshaped; each storage agent under a cgroup CPU quota of its own", storage, compute)
	}
	switch {
	case m == ModeLoopback:
		return results.ModeLoopback, "loopback requested: " + loop, nil
	case nsErr == nil:
		return results.ModeNetns, ns, nil
	case m == ModeNetns:
		return "", "", fmt.Errorf("%w: netns mode: %v", ErrConfig, nsErr)
	}
	return results.ModeLoopback, fmt.Sprintf("namespaces unavailable (%v): %s; run as root for tc shaping and cgroup limits", nsErr, loop), nil
}

func gpuFlag(rate float64) string {
	return "sim:" + strconv.FormatFloat(rate, 'f', -1, 64)
}

// describeDataset counts the dataset's files and bytes: JPEGs, or tar
// shards (whose samples the agents count).
func describeDataset(dir string) (results.Dataset, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return results.Dataset{}, fmt.Errorf("%w: dataset: %v", ErrConfig, err)
	}
	if !st.IsDir() {
		return results.Dataset{}, fmt.Errorf("%w: dataset %s is not a folder", ErrConfig, dir)
	}
	d := results.Dataset{Path: dir}
	// The storage agent's classes of a folder of JPEGs: its subfolders.
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if st, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && st.IsDir() {
				d.Classes++
			}
		}
	}
	err = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".jpg", ".jpeg":
			d.Samples++
			fallthrough
		case ".tar":
			info, err := e.Info()
			if err != nil {
				return err
			}
			d.Bytes += info.Size()
		}
		return nil
	})
	if d.Samples == 0 {
		d.Classes = 0 // tar shards: their .cls members say
	}
	if d.Samples > 0 {
		d.MeanBytes = float64(d.Bytes) / float64(d.Samples)
	}
	return d, err
}

// machine describes this host.
func machine() results.Machine {
	m := results.Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return m
}

// selfCPU is the CPU time this process (the testbed: its watchers,
// counters and loopback proxies; not the agents, its children) has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// grouped reports whether the nodes get cgroups in mode: netns mode with
// a cgroup CPU controller.
func grouped(mode string) bool { return mode == results.ModeNetns && cgroup.Available() == nil }

// pinning pins each of the storage agents to cores of its own, as many as
// the grid's largest --storage-cpus rounded up, and the compute agents to
// the others when that leaves them enough (bed.PinCores). Without cgroups
// (or outside netns mode) nothing is pinned.
func pinning(cores int, mode string, storage int, cpus []float64) bed.Pins {
	if !grouped(mode) {
		return bed.Pins{Why: "not pinned (no cgroups)"}
	}
	per := 1
	for _, c := range cpus {
		per = max(per, int(math.Ceil(c)))
	}
	return bed.PinCores(cores, storage, per)
}
