package policy

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sophon-dl/sophon/profiler"
)

// All returns every policy's plan, in the order nooff, alloff, resizeoff
// (when ResizeSplit finds a crop op), fastflow, sophon, optimal.
func All(p *profiler.Profile, r Resources) []Plan {
	plans := []Plan{NoOff(p, r), AllOff(p, r)}
	if k := ResizeSplit(p.Ops); k >= 0 {
		plans = append(plans, ResizeOff(p, r, k))
	}
	return append(plans, FastFlow(p, r), SOPHON(p, r), Optimal(p, r))
}

// Explain writes the `policy explain` table: every policy's predicted
// epoch time, bytes, storage and compute CPU seconds and bottleneck, then
// the lower bound.
func Explain(w io.Writer, p *profiler.Profile, r Resources) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tepoch s\tMB\tstorage CPU s\tcompute CPU s\tbottleneck\t\n")
	for _, pl := range All(p, r) {
		pr := pl.Pred
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%.1f\t%.1f\t%s\t\n", pl.Policy, pr.Seconds,
			pr.Bytes/1e6, pr.StorageCPUSeconds, pr.ComputeCPUSeconds, pr.Bottleneck)
	}
	fmt.Fprintf(tw, "bound\t%.3f\t\t\t\t\t\n", Bound(p, r))
	return tw.Flush()
}
