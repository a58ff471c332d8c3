// Command policy explains what each offloading policy would do with a
// profile: predicted epoch time, bytes on the link, storage and compute CPU,
// the bottleneck, and the lower bound no plan can beat; on one link, or on
// a cluster of storage and compute nodes (--cluster). `policy scale` plans
// a cluster instance of ImageNet's size and reports time and memory.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sophon-dl/sophon/internal/bytesize"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/cacheplan"
	"github.com/sophon-dl/sophon/policy/explain"
	"github.com/sophon-dl/sophon/policy/synthetic"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/profiler/estimate"
)

const usage = `policy: compare offloading policies on a profile.

Usage:
  policy explain (--profile FILE | --synthetic KIND:N | --estimate DIR) [--cut=false]
                 [resources] [--cache-bytes N|P%]
  policy explain --cluster FILE (--profile FILE | --synthetic KIND:N | --estimate DIR)
                 [--cut=false] [--replicas R|all] [--seed S] [--policy NAME]
  policy scale [flags]    (policy scale --help lists them)

A profile FILE is what the compute agent's stage 2 saves (--profile); a
synthetic profile is generated: KIND is openimages-like or imagenet-like,
N the number of samples; with --pipeline imagenet-train-q95 (or -q90) the
profile is of the compressed crop, whose split 4 sends the crop's JPEG
(policy/synthetic.Compressed). An estimated profile (--estimate DIR) plans
before the first run: DIR is an ImageFolder tree of JPEGs (one folder per
class), whose file sizes and JPEG headers give every sample's sizes
exactly and, with a calibration run of --calibrate files through the
--pipeline, its costs and compressed sizes (package profiler/estimate);
the crop boxes are those of run seed --seed and epoch --epoch. Resources
say what the link and the CPUs can do; a zero leaves that resource
unlimited.

The first table gives each policy's predicted epoch and how many samples
it sends as JPEG cuts (the split "cut": the storage agent cuts the JPEG to
the crop box without decoding it, the compute node decodes only the box);
the second how many samples each policy puts at each split. Only optimal
uses the cut, and only where the profile measured it (pipelines that start
with decode, random_resized_crop); synthetic profiles have it unless
--cut=false, which also drops it from a profile FILE, to compare.

With --cache-bytes, the compute node has a cache of that many bytes (or
that share of the dataset's bytes; 2G is 2 GiB, 2GB 2*10^9 bytes, read as
compute-agent --cache-bytes reads them): optimal and sophon choose which
samples stay resident there jointly with every other sample's split
(the file for a random pipeline, the finished output for a deterministic
one, fixed across epochs), lru is the baseline of an LRU cache of the
same size under a random order, and a table gives each policy's resident
samples, its first epoch (which fetches them) and its steady-state epoch,
beside the bound with and without the cache.

With --cluster, the resources come from a cluster description (YAML:
storage and compute nodes with their cores and rates, optional per-link
caps and a shared uplink; see policy/cmd/policy/testdata/cluster.yaml)
instead of the resource flags, which are then refused. Sample i trains on
rank i mod ranks; its R replicas are chosen by rendezvous hashing with the
seed, or with --replicas all every node holds it (replicated data). The
tables give every cluster policy's epoch, the bound, and the --policy
plan's load on every node. A compute agent that plans per storage agent
writes the cluster it planned on into its epoch report ("cluster"):
saved as a file, with the profile it saved and --replicas all, explain
prints the per-node loads the report predicts.

Examples:
  policy explain --synthetic openimages-like:20000 --link-mbit 430 \
    --storage-cores 32 --compute-cores 8 --gpu-rate 1150
  policy explain --estimate /data/imagenet/train --link-mbit 500 --storage-cores 4
  policy explain --cluster policy/cmd/policy/testdata/cluster.yaml \
    --synthetic imagenet-like:50000
  jq -c 'select(.epoch == 1) | .cluster' report.jsonl > cluster.json
  policy explain --cluster cluster.json --profile profile.zst --replicas all

Flags:
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, out, errOut io.Writer) int {
	if len(args) > 0 && args[0] == "scale" {
		return scale(args[1:], out, errOut)
	}
	if len(args) == 0 || args[0] != "explain" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(out, usage)
			newFlags(io.Discard, &options{}).SetOutput(out)
			return 0
		}
		fmt.Fprint(errOut, usage)
		return 2
	}
	o := options{errOut: errOut}
	fs := newFlags(errOut, &o)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.clusterPath != "" {
		if err := o.clusterOnly(fs); err != nil {
			fmt.Fprintln(errOut, "policy:", err)
			return 2
		}
	}
	p, err := o.profile()
	if err != nil {
		fmt.Fprintln(errOut, "policy:", err)
		return 2
	}
	// Plan on the costs the compute agent plans on: each sample's timing
	// half way to what its sizes predict (profiler.ExpectCosts).
	p = profiler.ExpectCosts(p)
	if !o.cut {
		p = synthetic.WithoutCut(p)
	}
	if o.clusterPath != "" {
		return explainCluster(&o, p, out, errOut)
	}
	r := policy.Resources{
		LinkBytesPerSec:  o.linkMbit * 1e6 / 8,
		StorageCores:     o.storageCores,
		ComputeCores:     o.computeCores,
		GPUSamplesPerSec: o.gpuRate,
		StorageSpeed:     o.storageSpeed,
	}
	cuts, total := 0, 0.0
	for i := range p.Samples {
		if p.Samples[i].HasCut() {
			cuts++
		}
		total += float64(p.Samples[i].Bytes[0])
	}
	if o.cacheBytes != "" {
		if r.CacheBytes, err = cacheplan.ParseBudget(o.cacheBytes, total); err != nil {
			fmt.Fprintln(errOut, "policy: --cache-bytes:", err)
			return 2
		}
	}
	fmt.Fprintf(out, "profile: %d samples, pipeline %s, %d ops, %d samples with a JPEG cut\n", len(p.Samples), p.Pipeline, p.N(), cuts)
	fmt.Fprintf(out, "resources: link %.0f Mbit/s, storage %.2f cores (speed %.2fx), compute %.2f cores, GPU %.0f samples/s (0 = unlimited)\n\n",
		o.linkMbit, o.storageCores, max(o.storageSpeed, 0), o.computeCores, o.gpuRate)
	if r.CacheBytes > 0 {
		fmt.Fprintf(out, "cache: %.1f MB, %.1f%% of the dataset's %.1f MB\n\n", r.CacheBytes/1e6, 100*r.CacheBytes/max(total, 1), total/1e6)
	}
	if err := explain.Single(out, p, r); err != nil {
		fmt.Fprintln(errOut, "policy:", err)
		return 1
	}
	return 0
}

type options struct {
	profilePath, synthetic                                      string
	estimateDir, pipeline                                       string
	seed, epoch                                                 uint64
	calibrate                                                   int
	cut                                                         bool
	linkMbit, storageCores, computeCores, gpuRate, storageSpeed float64
	clusterPath, detail, cacheBytes                             string
	replicas                                                    replicas
	errOut                                                      io.Writer
}

func newFlags(errOut io.Writer, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("policy explain", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	fs.StringVar(&o.profilePath, "profile", "", "profile `file` saved by the compute agent's stage 2")
	fs.StringVar(&o.synthetic, "synthetic", "", "generate a profile instead: `KIND:N` (openimages-like or imagenet-like)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic profile; with --estimate, the run seed whose crop boxes are estimated")
	fs.StringVar(&o.estimateDir, "estimate", "", "estimate the profile of the ImageFolder `dir` from its files' sizes and JPEG headers, calibrated on a few files")
	fs.StringVar(&o.pipeline, "pipeline", "imagenet-train", "with --estimate: the pipeline, a preset `name` or a spec file; with --synthetic: imagenet-train, or imagenet-train-q95 or -q90 for the compressed crop (encode_jpeg and a decode after the flip, sized and priced from testbed ops' measurements)")
	fs.IntVar(&o.calibrate, "calibrate", 32, "with --estimate: how many files to run through the pipeline to fit costs and compressed sizes")
	fs.Uint64Var(&o.epoch, "epoch", 0, "with --estimate: the epoch whose crop boxes are estimated")
	fs.BoolVar(&o.cut, "cut", true, "give a synthetic profile the JPEG cut's measurements; false drops them from any profile")
	fs.Float64Var(&o.linkMbit, "link-mbit", 500, "link bandwidth from storage to compute, Mbit/s of payload")
	fs.Float64Var(&o.storageCores, "storage-cores", 0, "storage cores for preprocessing (0 = unlimited)")
	fs.Float64Var(&o.computeCores, "compute-cores", 0, "compute-node cores for preprocessing (0 = unlimited)")
	fs.Float64Var(&o.gpuRate, "gpu-rate", 0, "samples/s the GPU consumes (0 = unlimited)")
	fs.Float64Var(&o.storageSpeed, "storage-speed", 1, "storage CPU speed relative to the compute node's")
	fs.StringVar(&o.cacheBytes, "cache-bytes", "", "the compute node's cache budget: `N` bytes (64MiB, 2G; "+bytesize.Units+") or a percentage of the dataset's bytes (25%); explain then shows each policy's residency, its first and steady-state epochs and the bound with the cache")
	fs.StringVar(&o.clusterPath, "cluster", "", "plan for the cluster this YAML `file` describes instead of one link (refuses the resource flags)")
	o.replicas = 2
	fs.Var(&o.replicas, "replicas", "with --cluster: replicas per sample (at most the storage nodes), placed by rendezvous hashing with --seed; `all` puts every sample on every node, in the file's order, as a compute agent over replicated data plans")
	fs.StringVar(&o.detail, "policy", policy.NameOptimal, "with --cluster: the policy whose plan's per-node loads are shown")
	return fs
}

func (o *options) profile() (*profiler.Profile, error) {
	given := 0
	for _, s := range []string{o.profilePath, o.synthetic, o.estimateDir} {
		if s != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, errors.New("give one of --profile, --synthetic and --estimate")
	case o.estimateDir != "":
		p, err := ops.LoadPipeline(o.pipeline)
		if err != nil {
			return nil, err
		}
		if o.calibrate < 1 {
			return nil, fmt.Errorf("--calibrate %d: want at least 1", o.calibrate)
		}
		prof, skipped, err := estimate.FromFolder(p, o.estimateDir, o.seed, o.epoch, o.calibrate, ops.DefaultLimits())
		if err != nil {
			return nil, err
		}
		if skipped > 0 {
			fmt.Fprintf(o.errOut, "policy: %d files under %s skipped: no readable JPEG header, or one the agents' default limits refuse (--max-pixels, --decode-memory, --max-output-bytes)\n", skipped, o.estimateDir)
		}
		return prof, nil
	case o.profilePath != "":
		return profiler.Load(o.profilePath, "", "")
	case o.synthetic != "":
		kind, n, ok := strings.Cut(o.synthetic, ":")
		count, err := strconv.Atoi(n)
		if !ok || err != nil || count < 1 {
			return nil, fmt.Errorf("--synthetic %q: want KIND:N with N >= 1", o.synthetic)
		}
		if kind != "openimages-like" && kind != "imagenet-like" {
			return nil, fmt.Errorf("--synthetic kind %q: want openimages-like or imagenet-like", kind)
		}
		p := synthetic.Profile(kind, count, o.seed)
		if o.cut {
			p = synthetic.WithCut(p, o.seed)
		}
		return o.syntheticPipeline(p, kind)
	}
	return nil, errors.New("give --profile FILE, --synthetic KIND:N or --estimate DIR")
}

// syntheticPipeline is the synthetic profile p of kind for --pipeline:
// imagenet-train as generated, imagenet-train-qQ its compressed-crop
// variant (synthetic.Compressed).
func (o *options) syntheticPipeline(p *profiler.Profile, kind string) (*profiler.Profile, error) {
	if o.pipeline == "imagenet-train" {
		return p, nil
	}
	q, err := strconv.Atoi(strings.TrimPrefix(o.pipeline, "imagenet-train-q"))
	if err != nil || !strings.HasPrefix(o.pipeline, "imagenet-train-q") {
		return nil, fmt.Errorf("--pipeline %q with --synthetic: want imagenet-train or imagenet-train-qQ (Q one of %v)", o.pipeline, synthetic.CompressedQualities(kind))
	}
	return synthetic.Compressed(p, kind, q, o.seed)
}
