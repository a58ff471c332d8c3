package policy

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sophon-dl/sophon/profiler"
)

// All returns every policy's plan, in the order nooff, alloff, resizeoff
// (when CropSplit finds a crop op), fastflow, sophon, optimal.
func All(p *profiler.Profile, r Resources) []Plan {
	plans := []Plan{NoOff(p, r), AllOff(p, r)}
	if k := CropSplit(p); k >= 0 {
		plans = append(plans, ResizeOff(p, r, k))
	}
	return append(plans, FastFlow(p, r), SOPHON(p, r), Optimal(p, r))
}

// Histogram counts a plan's samples per split: index 0 is SplitCut, index
// k+1 split k, for k in [0, n]; splits outside those count nowhere.
func (pl *Plan) Histogram(n int) []int {
	h := make([]int, n+2)
	for _, k := range pl.Split {
		if k >= SplitCut && k <= n {
			h[k+1]++
		}
	}
	return h
}

// Explain writes the `policy explain` tables: every policy's predicted
// epoch time, bytes, storage and compute CPU seconds, bottleneck and the
// number of samples it sends as JPEG cuts (SplitCut), then the lower
// bound; then how many samples each policy puts at each split.
func Explain(w io.Writer, p *profiler.Profile, r Resources) error {
	plans := All(p, r)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tepoch s\tMB\tstorage CPU s\tcompute CPU s\tbottleneck\tcut\t\n")
	for _, pl := range plans {
		pr := pl.Pred
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%.1f\t%.1f\t%s\t%d\t\n", pl.Policy, pr.Seconds,
			pr.Bytes/1e6, pr.StorageCPUSeconds, pr.ComputeCPUSeconds, pr.Bottleneck, pl.Histogram(p.N())[0])
	}
	fmt.Fprintf(tw, "bound\t%.3f\t\t\t\t\t\t\n", Bound(p, r))
	if err := tw.Flush(); err != nil {
		return err
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
		fmt.Fprintf(tw, "%d\t", k)
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
