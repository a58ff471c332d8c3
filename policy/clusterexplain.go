package policy

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sophon-dl/sophon/profiler"
)

// ExplainCluster writes the `policy explain --cluster` tables: every
// cluster policy's predicted epoch, bottleneck, bytes, CPU seconds and
// JPEG cuts, then the bound (with the bucketed LP's value and the
// resources its dual says bind); then, for the plan of the policy named
// detail (optimal when empty), per storage node the samples it serves, the
// bytes it sends, its CPU and its egress and CPU times, and per compute
// node the samples, bytes received, ingress, CPU and GPU times, the capped
// links and the uplink.
func ExplainCluster(w io.Writer, p *profiler.Profile, c Cluster, pl *Placement, detail string) error {
	plans, b, err := ClusterAll(p, c, pl)
	if err != nil {
		return err
	}
	if detail == "" {
		detail = NameOptimal
	}
	var shown *Plan
	for i := range plans {
		if plans[i].Policy == detail {
			shown = &plans[i]
		}
	}
	if shown == nil {
		return fmt.Errorf("%w %q for a cluster (one of %v)", ErrUnknownPolicy, detail, ClusterNames)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tepoch s\tx bound\tMB\tstorage CPU s\tcompute CPU s\tcut\tbottleneck\t\n")
	for _, pl := range plans {
		pr := pl.Cluster
		cuts := 0
		for _, k := range pl.Split {
			if k == SplitCut {
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
func writeLoads(w io.Writer, c Cluster, shown *Plan) error {
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
