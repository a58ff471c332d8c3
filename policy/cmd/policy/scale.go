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
	"github.com/sophon-dl/sophon/policy/instance"
)

const scaleUsage = `policy scale: plan a cluster instance of ImageNet's size and report the
planner's wall and CPU time, its memory, the bound and every cluster
policy's predicted epoch.

The default instance (instance.Scale): 1,281,167 ImageNet-like samples
with the JPEG cut's measurements, 8 storage agents (16 cores and 10 Gbit/s
of egress each, the first 4x faster), every sample on 2 of them by
rendezvous hashing, 8 compute nodes of 8 ranks (64 cores, 25 Gbit/s of
ingress, GPUs at 40,000 samples/s each). The timed step is
policy.Solve (the optimal plan and the bound, which includes
planning the baselines it compares with); each baseline is then timed on
its own.

Usage:
  policy scale [flags]

Flags:
`

// scale is `policy scale`: parse the instance, build and solve it, then
// time and print every baseline beside the optimal plan.
func scale(args []string, out, errOut io.Writer) int {
	sp, code := parseScale(args, errOut)
	if code >= 0 {
		return code
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
	opt, b, err := policy.Solve(policy.NameOptimal, policy.On(p, c, pl))
	if err != nil {
		fmt.Fprintln(errOut, "policy:", err)
		return 1
	}
	wall := time.Since(start)
	printSolve(out, wall, cpu0, &before, b)
	if err := scaleTable(out, opt, b, wall, func(name string) (policy.Plan, error) { return policy.ByName(name, policy.On(p, c, pl)) }); err != nil {
		fmt.Fprintln(errOut, "policy:", err)
		return 1
	}
	rss, _ := rusage()
	fmt.Fprintf(out, "\nprocess peak RSS at the end: %.0f MiB\n", rss)
	return 0
}

// parseScale reads `policy scale`'s flags into an instance; code is the
// exit code when the command ends here (help, or bad flags), else -1.
func parseScale(args []string, errOut io.Writer) (sp instance.Spec, code int) {
	sp = instance.Scale()
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
			return sp, 0
		}
		return sp, 2
	}
	if sp.Kind != "imagenet-like" && sp.Kind != "openimages-like" {
		fmt.Fprintf(errOut, "policy: --kind %q: want imagenet-like or openimages-like\n", sp.Kind)
		return sp, 2
	}
	if sp.Samples < 1 || sp.Storage < 1 || sp.Compute < 1 || sp.RanksPerNode < 1 || sp.Replicas < 1 || sp.Replicas > sp.Storage ||
		sp.Storage > policy.MaxStorageNodes || sp.Compute > policy.MaxComputeNodes {
		fmt.Fprintln(errOut, "policy: want --samples, --storage, --compute, --ranks-per-node >= 1 and 1 <= --replicas <= --storage (within the cluster limits)")
		return sp, 2
	}
	return sp, -1
}

// printSolve prints what solving took (wall time, CPU since cpu0, memory
// since before) and the bound.
func printSolve(out io.Writer, wall time.Duration, cpu0 float64, before *runtime.MemStats, b policy.BoundResult) {
	rss, cpu1 := rusage()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	fmt.Fprintf(out, "optimal plan + bound (policy.Solve): %.2f s wall, %.2f s CPU\n", wall.Seconds(), cpu1-cpu0)
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
}

// scaleTable plans and times every cluster baseline with plan and prints
// each beside opt (planned in wall) and the bound b.
func scaleTable(out io.Writer, opt policy.Plan, b policy.BoundResult, wall time.Duration, plan func(string) (policy.Plan, error)) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tepoch s\tx bound\tplan s\tbottleneck\t\n")
	for _, name := range policy.ClusterNames {
		pp, took := opt, wall
		if name != policy.NameOptimal {
			start := time.Now()
			var err error
			if pp, err = plan(name); err != nil {
				return err
			}
			took = time.Since(start)
		}
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%.2f\t%s\t\n", name, pp.Pred.Seconds, pp.Pred.Seconds/b.Seconds, took.Seconds(), pp.Pred.Bottleneck)
	}
	fmt.Fprintf(tw, "bound\t%.4f\t1.0000\t\t\t\n", b.Seconds)
	return tw.Flush()
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
