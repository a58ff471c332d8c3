package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sophon-dl/sophon/policy"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/testbed/experiment"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
	"github.com/sophon-dl/sophon/testbed/trainscript"
)

const runUsage = `testbed run: emulate a storage node and a GPU node on this machine and
compare the offloading policies over a shaped link.

As root: two network namespaces joined by a veth pair shaped with tc tbf at
--rate both ways, the storage agent under a cgroup CPU quota of
--storage-cpus (and its own --cpus budget), pinned apart (the storage
agent on --storage-cpus cores rounded up) where 3 cores are left for the
compute agent. Without root: loopback behind an in-process token bucket,
said so in the output and the report. Each cell of the grid (every --rate x
every --storage-cpus) runs every policy for --epochs with the real
storage-agent and compute-agent binaries (found next to this binary, then in
$PATH), then the peer row: PyTorch's DataLoader with torchvision transforms
reading the raw files over HTTP through the same link. Everything started is
removed on success, failure and Ctrl-C.

With --train each cell also runs the trainer row (sophon-client): the
compute agent serving its trainer socket (--strict-order, the cell's
--batch) and python/examples/train_cnn.py training a small CNN through the
Python client over the same link; the peer row then trains the same CNN
from its DataLoader. The report adds their images/s reaching the training
loop and the losses of their first steps, side by side. Needs
/usr/bin/python3 with torch, torchvision and numpy; a small --batch gives
more steps.

With --contend-at F (as root, with cgroups) each policy run gets a CPU hog
partway: once the compute agent has reported floor(F x epochs) epochs,
'testbed hog' with --contend-threads busy threads spins in the storage
agent's cgroup, under its quota, until the run ends. The report's
Contention table compares each contended epoch with the optimal plan's
prediction at the storage CPU the hog left and with nooff's epoch.

With --bucket (or --data s3://BUCKET/PREFIX --s3-root DIR) the storage
agents read the dataset from an S3 bucket instead of the folder: an S3
server (versitygw's POSIX gateway, make s3gw) runs on each storage node, in
its namespace but outside its CPU limit, over the dataset folder's parent
(or DIR), and each agent gets --data s3://BUCKET/PREFIX with the server's
endpoint and fresh keys in AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY. The same folder with and without --bucket gives the
same fingerprint, so --reference compares the tensors of both.

With --rtt (and --jitter, --loss) the two-node link is a WAN: in place of
the veth pair each namespace holds a TUN device, and this process moves
the IP packets between them, holding each for RTT/2 ± jitter and dropping
the fraction --loss in each direction, from a generator seeded by --seed;
tbf still shapes each device's egress at --rate. TCP then sees the round
trip end to end. It needs netns mode (root and /dev/net/tun) and one
storage and one compute node; the report's mode line gives the round trip,
jitter and loss. docs/testbed.md, "A WAN link", says how accurate it is and
what it costs. --rtt takes a list (--rtt 0,20ms,80ms), a dimension of the
grid like --rate: each cell runs at one round trip and is named for it
(OUT/100mbit-rtt20ms-cpu1), and results.json gives each cell's rtt_ms,
jitter_ms and loss. Given at all, --rtt sends every cell through the delay
line, RTT 0 included, so that the round trip is the only variable.

--cc cubic (or bbr, reno) sets the TCP congestion control of both nodes'
namespaces (net.ipv4.tcp_congestion_control, a per-namespace sysctl), so
both agents' connections use it; without it they take the host's
default. Each cell records which one its nodes ran with. Netns mode only.

With --jobs M the M compute agents of a star are M independent training
jobs (compute-agent --job job0..), not ranks of one: each over the whole
dataset, with its own report, profile and exactly-once and content check,
sharing the storage agent (its --storage-cpus the total, divided among
the jobs by storage-agent --job-weights, equal by default) and its
shaped link. Each job plans for the share the storage agent tells it; the
same run with --storage-flags=--job-shares=false plans every job as if
alone, as before shares. The report gives every epoch per job: its share,
its time, its bound for its share and the sum. --jobs-whole-budget runs
each policy again as <policy>-whole, every job planned for the whole
budget (compute-agent --whole-budget), side by side. --job-links gives
each job a link of its own at --rate (the storage link at their sum), so
that the jobs share the storage agent's CPU and not a link.

With --rate-schedule 0s:100mbit,3s:50mbit,6s:100mbit (netns mode, with or
without --rtt) the link's rate changes within each policy run's epochs
after the first, the same way in each: every epoch starts at --rate and
each step is a tc qdisc change of both ends (the delay line's too) at its
offset from the epoch's start, which the testbed takes from the compute
agent's report of the epoch before. results.json and the report's "Rate
schedule" table give when each change came into its epoch and the compute
agent's re-splits (--resplit): when, why and the new plan's predicted
remaining time. A policy named "<policy>-noresplit" (optimal-noresplit)
runs with the compute agent's --resplit=false, one plan per epoch, for
the side-by-side comparison.

With --storage-nodes N and --compute-nodes M (default 1 x 1, the two-node
link) each cell is a star instead: N storage namespaces and M compute
namespaces, each joined to a bridge in a hub namespace, each storage link
shaped with tbf at --rate both ways (or each at its own rate:
--storage-rates 400mbit,100mbit), compute links unshaped; N storage agents
(storage-1..N, the same dataset, each in a cgroup of its own with
--storage-cpus) and M compute agents run as --rank i --world M against all
of them. An epoch takes the slowest rank's time; results.json and the
report add each rank's epoch time, each storage link's bytes and each
storage agent's CPU, and exactly-once is checked over all ranks together.
--reference FILE compares every run's tensors with a 1 x 1 run's
--samples-out file (OUT/<cell>/<policy>.samples of a run with the same
--gen/--data, --seed, --pipeline and --epochs).

--pipeline imagenet-train,imagenet-train-q95 runs every policy once per
pipeline in each cell, on the same data, as rows "optimal
[imagenet-train-q95]" of one report (OUT/<cell>/<pipeline>/<policy>.*):
each pipeline's first run profiles (a profile per pipeline) and each has
its own reference tensors. A pipeline with encode_jpeg gets a fidelity
line: its delivered tensors, recomputed and checked against their hashes,
against the first lossless pipeline's for the same seed, epoch and sample
(PSNR and max abs error, on the decoded crop's 0-255 scale).

--placements pull,round-robin runs each policy once per placement, every
compute agent with --placement P: "optimal" (pull) and
"optimal-round-robin". Without it no --placement flag is passed.

--work-conserving off runs every compute agent with
--work-conserving=false; both runs each policy but nooff twice, the second
as "<policy>-nowc" without it. --repeat N runs each cell N times with fresh
agents; the report's Repeatability table gives each policy's spread.

The policy rows share one stage 2 profile: the first run records it in its
first epoch (No-Off, --force-profile) and the later runs reuse it. A row
named "<policy>-est" (and --train-policy <policy>-est) runs without a saved
profile instead, as a first run does: the compute agent plans its first
epoch from the catalog's JPEG header estimates and refines the plan with
what its epochs measure (docs/policy.md, "Plans from estimates"), so
"optimal,optimal-est" compares the two plans side by side.

Writes OUT/results.json (schema: docs/testbed.md), OUT/report.md, SVG charts
and each run's logs and agent reports under OUT/<rate>-cpu<cpus>/ (with
--rtt, OUT/<rate>-rtt<rtt>-cpu<cpus>/; with --repeat, -rep<k> after it).

Examples:
  testbed run --gen openimages-like:300 --rate 100mbit --storage-cpus 0.5
  testbed run --data /data/imagenet-val --rate 100mbit,200mbit,500mbit --storage-cpus 0.25,1 --epochs 3
  testbed run --data ds --policies nooff,sophon,optimal --no-peer --mode loopback
  testbed run --gen openimages-like:300 --rate 100mbit --storage-cpus 1 --policies nooff,optimal --no-peer --rtt 40ms --jitter 5ms --loss 0.1%
  testbed run --gen openimages-like:300 --rate 100mbit --storage-cpus 1 --policies nooff,optimal --no-peer --rtt 0,20ms,80ms --loss 0.1% --cc cubic
  testbed run --gen openimages-like:300 --rate 100mbit --storage-cpus 1 --policies optimal --no-peer --bucket
  testbed run --gen openimages-like:300 --rate 100mbit --storage-cpus 1 --epochs 3 --policies optimal,optimal-noresplit --no-peer --rate-schedule 0s:100mbit,3s:50mbit,6s:100mbit
  testbed run --data s3://datasets/val --s3-root /srv/s3 --rate 100mbit --storage-cpus 1 --policies optimal --no-peer
  testbed run --gen openimages-like:96 --rate 100mbit --storage-cpus 1 --epochs 2 --batch 16 --policies nooff --train
  testbed run --gen openimages-like:120 --rate 100mbit --storage-cpus 1 --epochs 4 --policies nooff,sophon,optimal --no-peer --contend-at 0.5
  testbed run --gen openimages-like:120 --rate 100mbit --storage-cpus 1 --policies nooff,sophon,optimal --no-peer --repeat 3 --work-conserving both
  testbed run --gen openimages-like:200 --rate 100mbit --storage-cpus 1 --epochs 2 --policies nooff --no-peer --storage-nodes 2 --compute-nodes 1
  testbed run --gen openimages-like:300 --rate 100mbit --storage-cpus 1,0.25 --epochs 4 --pipeline imagenet-train,imagenet-train-q95 --policies nooff,optimal --no-peer
  testbed run --gen openimages-like:300 --rate 100mbit --storage-cpus 1 --epochs 4 --policies nooff,lru,sophon,optimal --cache-bytes 25% --no-peer
  testbed run --gen openimages-like:200 --storage-rates 400mbit,100mbit --storage-nodes 2 --compute-nodes 2 --policies nooff,optimal --placements pull,round-robin --no-peer

Flags:
`

func runRun(ctx context.Context, args []string, log zerolog.Logger) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	data := fs.String("data", "", "dataset `folder`: JPEGs (ImageFolder or flat) or WebDataset tar shards; or s3://BUCKET/PREFIX with --s3-root, the folder S3ROOT/BUCKET/PREFIX served from a bucket")
	s3Root := fs.String("s3-root", "", "with --data s3://BUCKET/PREFIX: the `folder` whose subfolders are the buckets (an S3 server, versitygw, runs over it on each storage node)")
	bucket := fs.Bool("bucket", false, "serve the --gen or --data folder to the storage agents from an S3 bucket: versitygw over the folder's parent on each storage node, the agents given --data s3://NAME (NAME the folder's name)")
	gen := fs.String("gen", "", "generate the dataset instead: `KIND:N` (imagenet-like or openimages-like), written to OUT/data-KIND-N-sSEED (reused when present)")
	out := fs.String("out", "testbed-results", "output `folder`")
	rates := shape.Rates{shape.MustParseRate(experiment.DefaultRate)}
	fs.Var(&rates, "rate", "link `rates`, comma-separated (e.g. 100mbit,500mbit): tc tbf both ways")
	wanMTU := fs.Int("wan-mtu", 0, "with --rtt, --jitter or --loss: the TUN devices' `MTU` (0: 1500, Ethernet's; 9000 about halves the delay line's CPU at 500 Mbit/s, but TCP then shrugs off loss six times better)")
	var rateSchedule shape.Schedule
	fs.Var(&rateSchedule, "rate-schedule", "change the link's rate within each policy run's epochs after the first: `steps` OFFSET:RATE, comma-separated, offsets from each epoch's start (e.g. 0s:100mbit,3s:50mbit,6s:100mbit); netns mode, tc qdisc change of both ends")
	wan := addWANFlags(fs, "netns mode and the two-node link only: the link becomes a TUN device in each namespace joined by a user-space delay line in this process, tbf still shaping both ways at --rate; given at all, every cell (RTT 0 included) goes through the delay line, so that the round trip is the only thing that differs between them", true)
	cc := fs.String("cc", "", "TCP congestion `control` of both nodes' namespaces (their net.ipv4.tcp_congestion_control, so both agents' connections): cubic, bbr, reno or another the kernel offers; netns mode only (default: the host's, which each cell records)")
	cpus := fs.String("storage-cpus", strconv.FormatFloat(experiment.DefaultCPUs, 'f', -1, 64), "storage agent CPU `limits` in cores, comma-separated, fractions allowed")
	policies := fs.String("policies", "", "`policies` to run, comma-separated, in order (the first is the reference for placement invariance; default: "+strings.Join(policy.Names, ",")+", lru only with --cache-bytes); a policy with "+experiment.EstSuffix+" (optimal"+experiment.EstSuffix+") runs without a saved profile: planned from header estimates, as a first run is; with "+experiment.NoResplitSuffix+" (optimal"+experiment.NoResplitSuffix+") it runs with the compute agent's --resplit=false")
	epochs := fs.Int("epochs", experiment.DefaultEpochs, "`epochs` per policy (the first run's first epoch profiles, No-Off)")
	pipeline := fs.String("pipeline", experiment.DefaultPipeline, "pipeline preset `names`, comma-separated: with several (imagenet-train,imagenet-train-q95) every policy runs once per pipeline in each cell, on the same data, as rows of one report, each pipeline with its own profile and content reference, and each one with encode_jpeg gets a fidelity line (PSNR, max abs error) against the first without")
	gpuRate := fs.Float64("gpu-rate", experiment.DefaultGPURate, "simulated GPU `samples/s`, for the agents and the peer alike")
	batch := fs.Int("batch", 0, "batch `size` (default: the compute agent's)")
	seed := fs.Uint64("seed", 1, "run `seed` (and the generated dataset's)")
	noPeer := fs.Bool("no-peer", false, "skip the torchvision DataLoader row")
	python := fs.String("python", "", "`interpreter` for the peer and the trainer (default /usr/bin/python3)")
	train := fs.Bool("train", false, "add the trainer row (a small CNN trained through the Python client from the compute agent's trainer socket; one per --pipeline) and make the peer row train the same CNN")
	trainPolicy := fs.String("train-policy", "nooff", "the trainer row's compute-agent `plan`: nooff or a policy ("+strings.Join(policy.Names, ", ")+"), optionally with "+experiment.EstSuffix+" (no saved profile)")
	trainScript := fs.String("train-script", "", "the trainer `script` (default: "+trainscript.Script+" in the repository, found from this binary's folder or the working directory)")
	mode := fs.String("mode", string(experiment.ModeAuto), "`mode`: auto (netns as root, else loopback), netns or loopback")
	bin := fs.String("bin", "", "`folder` with storage-agent, compute-agent and testbed (default: this binary's folder, then $PATH)")
	scale := fs.String("scale", "", "`statement` of how the emulation maps to real hardware, for the report (default: derived from the rates)")
	computeFlags := fs.String("compute-flags", "", "extra compute-agent `flags`, space-separated")
	storageFlags := fs.String("storage-flags", "", "extra storage-agent `flags`, space-separated")
	contendAt := fs.Float64("contend-at", 0, "start a CPU hog in the storage agent's cgroup once this `fraction` of each policy run's epochs is done (floor(F x epochs)); 0: none")
	contendThreads := fs.Int("contend-threads", 1, "the hog's busy `threads`")
	workConserving := fs.String("work-conserving", experiment.WorkConservingOn, "`setting`: on (the compute agent's default), off (--work-conserving=false) or both (each policy but nooff also as <policy>-nowc)")
	repeat := fs.Int("repeat", 1, "run each cell `N` times, with fresh agents")
	storageNodes := fs.Int("storage-nodes", 1, "storage `nodes` (agents) per cell; above 1, or with --compute-nodes above 1, the cell is a star of namespaces")
	computeNodes := fs.Int("compute-nodes", 1, "compute `nodes` per cell: compute agents run as --rank i --world M")
	jobs := fs.Int("jobs", 1, "independent training `jobs` per cell, one compute node each (compute-agent --job job<i>, each over the whole dataset, its own report and exactly-once check), sharing the storage agent, whose --storage-cpus is their total; add --storage-flags=--job-shares=false for the jobs planned as if alone")
	jobsWhole := fs.Bool("jobs-whole-budget", false, "with --jobs, run each policy again as <policy>-whole, every job with compute-agent --whole-budget: planned as if alone on the storage agent (as before shares), beside the run planned for its share")
	jobLinks := fs.Bool("job-links", false, "with --jobs, give each job a link of its own at --rate (each compute node's link shaped, the storage link at the jobs' sum), so that the jobs share the storage agent's CPU and not a link (netns mode)")
	var storageRates shape.Rates
	fs.Var(&storageRates, "storage-rates", "one link `rate` per storage node, comma-separated (e.g. 400mbit,100mbit), in place of --rate")
	placements := fs.String("placements", "", "run each policy once per compute-agent `placement`, comma-separated: "+strings.Join(experiment.Placements, ", ")+" (default: no --placement flag)")
	reference := fs.String("reference", "", "a 1 x 1 run's --samples-out `file` to compare every run's tensors with (default: the experiment's first exactly-once run)")
	cacheBytes := fs.String("cache-bytes", "", "give every compute agent a fresh cache per run of this `budget`: bytes (64MiB) or a percentage of the dataset's bytes (25%); adds the cache table and allows the lru policy row (No-Off through an LRU cache of raw files)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	insecure := fs.Bool("insecure", false, "run the agents with --insecure (default: every cell makes a fresh development CA, certificates and gossip key, and the agents use mutual TLS)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("run: unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if len(storageRates) > 0 {
		if set["rate"] {
			return fmt.Errorf("run: --rate and --storage-rates exclude each other")
		}
		rates = nil
		if !set["storage-nodes"] {
			*storageNodes = len(storageRates) // one node per rate
		}
	}
	cfg := experiment.Config{
		StorageNodes: *storageNodes, ComputeNodes: *computeNodes, Jobs: *jobs, JobsWholeBudget: *jobsWhole, JobLinks: *jobLinks, StorageRates: storageRates,
		Placements: splitList(*placements), Reference: *reference,
		Out: *out, Rates: rates, Policies: splitList(*policies), Epochs: *epochs, Pipelines: splitList(*pipeline),
		GPURate: *gpuRate, Batch: *batch, Seed: *seed, Peer: !*noPeer, Python: *python, Mode: experiment.Mode(*mode),
		Train: *train, TrainPolicy: *trainPolicy, TrainScript: *trainScript,
		Bin: *bin, Scale: *scale, ComputeFlags: strings.Fields(*computeFlags), StorageFlags: strings.Fields(*storageFlags),
		Insecure: *insecure, CacheBytes: *cacheBytes,
		ContendAt: *contendAt, ContendThreads: *contendThreads, WorkConserving: *workConserving, Repeat: *repeat,
		RTTs: wan.rtt, Jitter: *wan.jitter, Loss: float64(wan.loss), WANMTU: *wanMTU, CongestionControl: *cc, RateSchedule: rateSchedule,
		Log: log,
	}
	if wan.set() && experiment.Mode(*mode) == experiment.ModeLoopback {
		return fmt.Errorf("run: --rtt, --jitter and --loss need netns mode (root): the delay line runs between two namespaces, not on loopback")
	}
	if *cc != "" && experiment.Mode(*mode) == experiment.ModeLoopback {
		return fmt.Errorf("run: --cc needs netns mode (root): it sets the node namespaces' tcp_congestion_control, not the host's")
	}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	for _, s := range splitList(*cpus) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("run: --storage-cpus %q: %v", s, err)
		}
		cfg.StorageCPUs = append(cfg.StorageCPUs, v)
	}
	switch {
	case *data != "" && *gen != "":
		return fmt.Errorf("run: --data and --gen exclude each other")
	case strings.HasPrefix(*data, "s3://"):
		if *s3Root == "" {
			return fmt.Errorf("run: --data %s needs --s3-root, the folder whose subfolders are the buckets", *data)
		}
		cfg.Data, cfg.S3Root = filepath.Join(*s3Root, filepath.FromSlash(strings.TrimPrefix(*data, "s3://"))), *s3Root
	case *data != "":
		cfg.Data = *data
	case *gen != "":
		kind, n, err := parseGen(*gen)
		if err != nil {
			return err
		}
		cfg.Data = filepath.Join(*out, fmt.Sprintf("data-%s-%d-s%d", kind, n, *seed))
		cfg.DataKind, cfg.DataSeed = kind, *seed
		if err := generate(cfg.Data, kind, n, *seed, log); err != nil {
			return err
		}
	default:
		fs.Usage()
		return fmt.Errorf("run: --data or --gen is required")
	}
	if *bucket && cfg.S3Root == "" {
		abs, err := filepath.Abs(cfg.Data)
		if err != nil {
			return err
		}
		cfg.Data, cfg.S3Root = abs, filepath.Dir(abs)
	}
	if cfg.Scale == "" {
		cfg.Scale = scaleStatement(append(slices.Clip(cfg.Rates), cfg.StorageRates...), cfg.StorageCPUs)
	}
	res, err := experiment.Run(ctx, cfg)
	if res != nil {
		fmt.Println()
		if res.Mode == results.ModeLoopback {
			fmt.Printf("NOTE: loopback mode: %s\n\n", res.ModeNote)
		}
		if terr := results.Table(os.Stdout, res); terr != nil && err == nil {
			err = terr
		}
		fmt.Printf("\nresults: %s\nreport:  %s\n", filepath.Join(cfg.Out, "results.json"), filepath.Join(cfg.Out, "report.md"))
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseGen(s string) (string, int, error) {
	kind, ns, ok := strings.Cut(s, ":")
	n, err := strconv.Atoi(ns)
	if !ok || err != nil || n < 1 {
		return "", 0, fmt.Errorf("run: --gen %q: want KIND:N, e.g. openimages-like:300", s)
	}
	if _, err := synthSpec(kind); err != nil {
		return "", 0, err
	}
	return kind, n, nil
}

func synthSpec(kind string) (synth.Spec, error) {
	switch kind {
	case "imagenet-like":
		return synth.ImageNetLike, nil
	case "openimages-like":
		return synth.OpenImagesLike, nil
	}
	return synth.Spec{}, fmt.Errorf("unknown dataset kind %q (imagenet-like, openimages-like)", kind)
}

// generate writes the dataset unless a complete one is already there.
func generate(dir, kind string, n int, seed uint64, log zerolog.Logger) error {
	done := filepath.Join(dir, ".complete")
	if _, err := os.Stat(done); err == nil {
		log.Info().Str("data", dir).Msg("reusing generated dataset")
		return nil
	}
	spec, err := synthSpec(kind)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	log.Info().Str("kind", kind).Int("n", n).Str("out", dir).Msg("generating dataset")
	if _, err := synth.WriteImageFolder(dir, spec, seed, n, 4); err != nil {
		return err
	}
	return os.WriteFile(done, nil, 0o644)
}

// scaleStatement says how the rates map to the paper's 500 Mbit/s link.
func scaleStatement(rates []shape.Rate, cpus []float64) string {
	const ref = 500e6
	var parts []string
	seen := map[string]bool{}
	for _, r := range rates {
		if r.IsZero() || seen[r.String()] {
			continue
		}
		seen[r.String()] = true
		k := ref / r.Bits()
		if k < 1.05 && k > 0.95 {
			parts = append(parts, fmt.Sprintf("%s is the paper's 500 Mbit/s link unscaled", r))
			continue
		}
		var eq []string
		for _, c := range cpus {
			eq = append(eq, fmt.Sprintf("%g cores", c*k))
		}
		parts = append(parts, fmt.Sprintf("%s = 500 Mbit/s scaled down %.3gx: the link-to-CPU ratios match a 500 Mbit/s link with %.3gx the CPUs (storage CPUs %s)",
			r, k, k, strings.Join(eq, ", ")))
	}
	return strings.Join(parts, "; ")
}
