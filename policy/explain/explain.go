// Package explain writes the tables of `policy explain`: every policy's
// predicted epoch on one link (Single), with the compute node's cache
// where the resources have one, or on a cluster (Cluster), beside the
// lower bound no plan can beat.
package explain

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/cacheplan"
	"github.com/sophon-dl/sophon/profiler"
)

// Single writes the `policy explain` tables: every policy's predicted
// epoch time, bytes, storage and compute CPU seconds, bottleneck and the
// number of samples it sends as JPEG cuts (policy.SplitCut), then the lower
// bound (policy.Bound, with the cache); with r.CacheBytes, each policy's residency
// (the cache table); then how many samples each policy puts at each split.
func Single(w io.Writer, p *profiler.Profile, r policy.Resources) error {
	in := policy.OneNode(p, r)
	plans, b, err := policy.All(in)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tepoch s\tMB\tstorage CPU s\tcompute CPU s\tbottleneck\tcut\t\n")
	for _, pl := range plans {
		pr := pl.Pred
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%.1f\t%.1f\t%s\t%d\t\n", pl.Policy, pr.Seconds,
			pr.Bytes/1e6, pr.StorageCPUSeconds, pr.ComputeCPUSeconds, pr.Bottleneck, pl.Histogram(p.N())[0])
	}
	fmt.Fprintf(tw, "bound\t%.3f\t\t\t\t\t\t\n", b.Seconds)
	if err := tw.Flush(); err != nil {
		return err
	}
	writeBinding(w, b, len(p.Samples), r.GPUSamplesPerSec)
	if r.CacheBytes > 0 {
		if err := cache(w, in, b.Seconds, plans); err != nil {
			return err
		}
	}

	legend := make([]string, p.N())
	for j, op := range p.Ops {
		legend[j] = strconv.Itoa(j+1) + " " + op
	}
	fmt.Fprintf(w, "\nsamples per split (split k runs ops [0:k] on storage: %s; cut sends the JPEG cut to the crop box)\n",
		strings.Join(legend, ", "))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tcut\t")
	for k := 0; k <= p.N(); k++ {
		fmt.Fprintf(tw, "%s\t", splitName(p, k))
	}
	fmt.Fprintf(tw, "\n")
	for _, pl := range plans {
		fmt.Fprintf(tw, "%s\t", pl.Policy)
		for _, c := range pl.Histogram(p.N()) {
			fmt.Fprintf(tw, "%d\t", c)
		}
		fmt.Fprintf(tw, "\n")
	}
	return tw.Flush()
}

// splitName is split k's column in the samples-per-split table: its
// number, and for the split after encode_jpeg, which sends a JPEG of
// the crop rather than pixels, "k (after encode_jpeg)".
func splitName(p *profiler.Profile, k int) string {
	if k > 0 && p.Ops[k-1] == "encode_jpeg" {
		return strconv.Itoa(k) + " (after encode_jpeg)"
	}
	return strconv.Itoa(k)
}

// writeBinding writes which resources the bound says bind: the GPU
// alone where it reaches the bound (n samples at gpuRate), else the
// LP's dual weights.
func writeBinding(w io.Writer, b policy.BoundResult, n int, gpuRate float64) {
	if gpuRate > 0 {
		gpu := float64(n) / gpuRate
		if b.Seconds <= gpu*(1+1e-9) {
			fmt.Fprintf(w, "\nbound: %.3f s, the GPU's own (%d samples at %.0f/s): no plan can be faster\n", b.Seconds, n, gpuRate)
			return
		}
		fmt.Fprintf(w, "\nbound: %.3f s, %.2fx the GPU's own %.3f s (%d samples at %.0f/s)\n", b.Seconds, b.Seconds/gpu, gpu, n, gpuRate)
	} else {
		fmt.Fprintf(w, "\nbound: %.3f s\n", b.Seconds)
	}
	var binding []string
	for _, r := range b.Binding {
		if r.Weight >= 0.01 {
			binding = append(binding, fmt.Sprintf("%s %.2f", r.Resource, r.Weight))
		}
	}
	if len(binding) > 0 {
		fmt.Fprintf(w, "binding resources (dual weights): %s\n", strings.Join(binding, ", "))
	}
}

// Cluster writes the `policy explain --cluster` tables: every
// cluster policy's predicted epoch, bottleneck, bytes, CPU seconds and
// JPEG cuts, then the bound (with the bucketed LP's value and the
// resources its dual says bind); then, for the plan of the policy named
// detail (optimal when empty), per storage node the samples it serves, the
// bytes it sends, its CPU and its egress and CPU times, and per compute
// node the samples, bytes received, ingress, CPU and GPU times, the capped
// links and the uplink.
func Cluster(w io.Writer, p *profiler.Profile, c policy.Cluster, pl *policy.Placement, detail string) error {
	plans, b, err := policy.All(policy.On(p, c, pl))
	if err != nil {
		return err
	}
	if detail == "" {
		detail = policy.NameOptimal
	}
	var shown *policy.Plan
	for i := range plans {
		if plans[i].Policy == detail {
			shown = &plans[i]
		}
	}
	if shown == nil {
		return fmt.Errorf("%w %q for a cluster (one of %v)", policy.ErrUnknownPolicy, detail, policy.ClusterNames)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tepoch s\tx bound\tMB\tstorage CPU s\tcompute CPU s\tcut\tbottleneck\t\n")
	for _, pl := range plans {
		pr := pl.Cluster
		cuts := 0
		for _, k := range pl.Split {
			if k == policy.SplitCut {
				cuts++
			}
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%d\t%s\t\n", pl.Policy, pr.Seconds, ratio(pr.Seconds, b.Seconds),
			pr.Bytes/1e6, pr.StorageCPUSeconds, pr.ComputeCPUSeconds, cuts, pr.Bottleneck)
	}
	fmt.Fprintf(tw, "bound\t%.3f\t1.000\t\t\t\t\t\t\n", b.Seconds)
	if err := tw.Flush(); err != nil {
		return err
	}
	var binding []string
	for _, r := range b.Binding {
		if r.Weight >= 0.01 {
			binding = append(binding, fmt.Sprintf("%s %.2f", r.Resource, r.Weight))
		}
	}
	if len(binding) == 0 {
		binding = []string{"none (the GPUs bound the epoch)"}
	}
	fmt.Fprintf(w, "\nbound: %.3f s, a lower bound on every plan; the bucketed LP's plan predicts %.3f s (%d buckets of %d samples, %d iterations)\n",
		b.Seconds, b.BucketLP, b.Buckets, b.Samples, b.Iterations)
	fmt.Fprintf(w, "binding resources (dual weights): %s\n", strings.Join(binding, ", "))

	return writeLoads(w, c, shown)
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// writeLoads writes plan shown's load on every node, capped link and the
// uplink of cluster c.
func writeLoads(w io.Writer, c policy.Cluster, shown *policy.Plan) error {
	pr := shown.Cluster
	fmt.Fprintf(w, "\n%s plan: epoch %.3f s, bottleneck %s\n", shown.Policy, pr.Seconds, pr.Bottleneck)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "storage\tsamples\tMB\tCPU s\tCPU time s\tegress s\t\n")
	for j, s := range pr.Storage {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.3f\t%.3f\t\n", c.Storage[j].Name, s.Samples, s.Bytes/1e6, s.CPUSeconds, s.CPUTime, s.EgressTime)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "compute\tsamples\tMB\tingress s\tCPU s\tCPU time s\tGPU s\t\n")
	for k, n := range pr.Compute {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.3f\t%.1f\t%.3f\t%.3f\t\n", c.Compute[k].Name, n.Samples, n.Bytes/1e6, n.IngressTime, n.CPUSeconds, n.CPUTime, n.GPUTime)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(pr.Links) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "link\tMB\ttime s\t\n")
		for i, l := range pr.Links {
			fmt.Fprintf(tw, "%s->%s\t%.1f\t%.3f\t\n", c.Links[i].Storage, c.Links[i].Compute, l.Bytes/1e6, l.Time)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if c.SharedUplinkBytesPerSec > 0 {
		fmt.Fprintf(w, "\nshared uplink: %.1f MB, %.3f s\n", pr.Bytes/1e6, pr.UplinkTime)
	}
	return nil
}

// cache writes the cache table of Single: per policy the samples
// resident and their bytes, its predicted first epoch (policy.FirstEpoch:
// resident samples fetched at the cache split; lru's cold) and steady-state epoch, and
// both bounds (with the cache, cb).
func cache(w io.Writer, in policy.Instance, cb float64, plans []policy.Plan) error {
	p := in.Profile
	k := policy.CacheSplit(p)
	none := in
	none.CacheBytes = 0
	b0, err := policy.Bound(none)
	if err != nil {
		return err
	}
	what := "the file; the first epoch fetches resident samples raw"
	if k > 0 {
		what = "the finished output; the first epoch makes it from whatever it fetches"
	}
	fmt.Fprintf(w, "\ncache: %.1f MB at split %d (%s)\n", in.CacheBytes/1e6, k, what)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tresident\tresident MB\tepoch 0 s\tepoch s\t\n")
	for _, pl := range plans {
		var n int
		var b float64
		for i, c := range pl.Cached {
			if c {
				n++
				b += cacheplan.Entry(&p.Samples[i], k)
			}
		}
		e0, err := policy.FirstEpoch(in, pl)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.3f\t%.3f\t\n", pl.Policy, n, b/1e6, e0.Pred.Seconds, pl.Pred.Seconds)
	}
	fmt.Fprintf(tw, "bound, cache\t\t\t\t%.3f\t\n", cb)
	fmt.Fprintf(tw, "bound, none\t\t\t\t%.3f\t\n", b0.Seconds)
	return tw.Flush()
}
