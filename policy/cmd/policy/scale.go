package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/clustertest"
)

const scaleUsage = `policy scale: plan a cluster instance of ImageNet's size and report the
planner's wall and CPU time, its memory, the bound and every cluster
policy's predicted epoch.

The default instance (clustertest.Scale): 1,281,167 ImageNet-like samples
with the JPEG cut's measurements, 8 storage agents (16 cores and 10 Gbit/s
of egress each, the first 4x faster), every sample on 2 of them by
rendezvous hashing, 8 compute nodes of 8 ranks (64 cores, 25 Gbit/s of
ingress, GPUs at 40,000 samples/s each). The timed step is
policy.ClusterSolve (the optimal plan and the bound, which includes
planning the baselines it compares with); each baseline is then timed on
its own.

Usage:
  policy scale [flags]

Flags:
`

// scale is `policy scale`.
func scale(args []string, out, errOut io.Writer) int {
	sp := clustertest.Scale()
	fs := flag.NewFlagSet("policy scale", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() { fmt.Fprint(fs.Output(), scaleUsage); fs.PrintDefaults() }
	fs.IntVar(&sp.Samples, "samples", sp.Samples, "samples in the synthetic profile")
	fs.StringVar(&sp.Kind, "kind", sp.Kind, "synthetic profile kind: imagenet-like or openimages-like")
	fs.BoolVar(&sp.Cut, "cut", sp.Cut, "give the profile the JPEG cut's measurements")
	fs.Uint64Var(&sp.Seed, "seed", sp.Seed, "seed of the profile and the replica placement")
	fs.IntVar(&sp.Storage, "storage", sp.Storage, "storage nodes")
	fs.IntVar(&sp.Compute, "compute", sp.Compute, "compute nodes")
	fs.IntVar(&sp.RanksPerNode, "ranks-per-node", sp.RanksPerNode, "ranks per compute node")
	fs.IntVar(&sp.Replicas, "replicas", sp.Replicas, "replicas per sample")
	fs.Float64Var(&sp.FastEgress, "fast-egress", sp.FastEgress, "storage node 0's egress as a multiple of the others'")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if sp.Kind != "imagenet-like" && sp.Kind != "openimages-like" {
		fmt.Fprintf(errOut, "policy: --kind %q: want imagenet-like or openimages-like\n", sp.Kind)
		return 2
	}
	if sp.Samples < 1 || sp.Storage < 1 || sp.Compute < 1 || sp.RanksPerNode < 1 || sp.Replicas < 1 || sp.Replicas > sp.Storage ||
		sp.Storage > policy.MaxStorageNodes || sp.Compute > policy.MaxComputeNodes {
		fmt.Fprintln(errOut, "policy: want --samples, --storage, --compute, --ranks-per-node >= 1 and 1 <= --replicas <= --storage (within the cluster limits)")
		return 2
	}

	start := time.Now()
	p, c, pl, err := sp.Build()
	if err != nil {
		fmt.Fprintln(errOut, "policy:", err)
		return 1
	}
	built := time.Since(start)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	rssBuilt, cpu0 := rusage()
	fmt.Fprintf(out, "instance: %d %s samples (cut %v), %d storage nodes (s0 at %.0fx egress), %d compute nodes x %d ranks, %d replicas (%d distinct sets)\n",
		sp.Samples, sp.Kind, sp.Cut, sp.Storage, max(sp.FastEgress, 1), sp.Compute, sp.RanksPerNode, sp.Replicas, len(pl.Sets))
	fmt.Fprintf(out, "built in %.2f s; live heap %.0f MiB, peak RSS so far %.0f MiB\n", built.Seconds(), float64(before.HeapAlloc)/(1<<20), rssBuilt)

	start = time.Now()
	opt, b, err := policy.ClusterSolve(p, c, pl)
	if err != nil {
		fmt.Fprintln(errOut, "policy:", err)
		return 1
	}
	wall := time.Since(start)
	rss, cpu1 := rusage()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	fmt.Fprintf(out, "optimal plan + bound (policy.ClusterSolve): %.2f s wall, %.2f s CPU\n", wall.Seconds(), cpu1-cpu0)
	fmt.Fprintf(out, "memory: allocated while planning (TotalAlloc) %.0f MiB, heap from the OS (HeapSys) %.0f MiB, process peak RSS %.0f MiB (profile included)\n",
		float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), float64(after.HeapSys)/(1<<20), rss)
	fmt.Fprintf(out, "bound: %.4f s (bucketed LP %.4f s, %d buckets, %d iterations; binding:", b.Seconds, b.BucketLP, b.Buckets, b.Iterations)
	for i, r := range b.Binding {
		if i == 4 {
			fmt.Fprintf(out, " ...")
			break
		}
		fmt.Fprintf(out, " %s %.2f", r.Resource, r.Weight)
	}
	fmt.Fprintf(out, ")\n\n")

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tepoch s\tx bound\tplan s\tbottleneck\t\n")
	for _, name := range policy.ClusterNames {
		if name == policy.NameOptimal {
			fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%.2f\t%s\t\n", name, opt.Pred.Seconds, opt.Pred.Seconds/b.Seconds, wall.Seconds(), opt.Pred.Bottleneck)
			continue
		}
		start := time.Now()
		pp, err := policy.ClusterByName(name, p, c, pl)
		if err != nil {
			fmt.Fprintln(errOut, "policy:", err)
			return 1
		}
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%.2f\t%s\t\n", name, pp.Pred.Seconds, pp.Pred.Seconds/b.Seconds, time.Since(start).Seconds(), pp.Pred.Bottleneck)
	}
	fmt.Fprintf(tw, "bound\t%.4f\t1.0000\t\t\t\n", b.Seconds)
	if err := tw.Flush(); err != nil {
		return 1
	}
	rss, _ = rusage()
	fmt.Fprintf(out, "\nprocess peak RSS at the end: %.0f MiB\n", rss)
	return 0
}

// rusage returns the process's peak RSS in MiB (Linux reports KiB) and
// its user and system CPU seconds so far.
func rusage() (float64, float64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return float64(ru.Maxrss) / 1024, float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
