package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/profiler"
)

const noiseUsage = `testbed noise: how far apart independent profiles of one dataset time the
same samples, and what that does to a plan that ranks samples by bytes saved
per CPU-ms (docs/policy.md, "The winner's curse").

Give two or more profiles of the same dataset and pipeline, each recorded by
its own run (a testbed run writes one per cell: OUT/profile-RATE-cpuC.zst).
For the JPEG cut and each split that sends fewer bytes than the file, it
prints the spread of a sample's cost across the profiles (median and 90th
percentile of the coefficient of variation), and the selection bias: the
best-ranked 10%, 25% and 50% of the samples in one profile, costed by
another, over what the first said (both over their whole-profile totals, so
that one machine's clock being busier cancels), the mean over every ordered
pair with its range. Once with the recorded timings and once with the costs
the planner plans on (profiler.ExpectCosts).

Example:
  testbed noise OUT1/profile-100mbit-cpu0.5.zst OUT2/profile-100mbit-cpu0.5.zst OUT3/profile-100mbit-cpu0.5.zst

Flags:
`

func runNoise(_ context.Context, args []string, _ zerolog.Logger) error {
	fs := flag.NewFlagSet("noise", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), noiseUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		fs.Usage()
		return errors.New("noise: want two or more profiles")
	}
	var ps []*profiler.Profile
	for _, path := range fs.Args() {
		p, err := profiler.Load(path, "", "")
		if err != nil {
			return fmt.Errorf("noise: %w", err)
		}
		ps = append(ps, p)
	}
	return writeNoise(os.Stdout, ps)
}

// costColumn is one storage-side cost a plan ranks samples by: its name,
// the sample's cost (ns; 0: none) and the bytes offloading it saves.
type costColumn struct {
	name  string
	cost  func(*profiler.SampleProfile) float64
	saved func(*profiler.SampleProfile) float64
}

// noiseColumns is the cut and each split that sends fewer bytes than the
// files over p's samples.
func noiseColumns(p *profiler.Profile) []costColumn {
	var cols []costColumn
	if slices.ContainsFunc(p.Samples, func(s profiler.SampleProfile) bool { return s.HasCut() }) {
		cols = append(cols, costColumn{"cut",
			func(s *profiler.SampleProfile) float64 { return float64(s.CutNS) },
			func(s *profiler.SampleProfile) float64 { return float64(s.Raw - s.CutBytes) }})
	}
	for k := 1; k <= p.N(); k++ {
		var raw, at int64
		for _, s := range p.Samples {
			raw, at = raw+s.Raw, at+s.Bytes[k]
		}
		if at >= raw {
			continue
		}
		cols = append(cols, costColumn{fmt.Sprintf("split %d (after %s)", k, p.Ops[k-1]),
			func(s *profiler.SampleProfile) float64 {
				c := int64(0)
				for _, v := range s.OpNS[:k] {
					c += v
				}
				return float64(c)
			},
			func(s *profiler.SampleProfile) float64 { return float64(s.Raw - s.Bytes[k]) }})
	}
	return cols
}

// noiseFractions are the best-ranked shares the selection bias is taken
// over.
var noiseFractions = []float64{0.10, 0.25, 0.50}

// writeNoise writes the spread and the selection bias of ps, profiles of
// one dataset, to w.
func writeNoise(w io.Writer, ps []*profiler.Profile) error {
	n := len(ps[0].Samples)
	for i, p := range ps[1:] {
		if len(p.Samples) != n || p.Fingerprint != ps[0].Fingerprint || p.Pipeline != ps[0].Pipeline {
			return fmt.Errorf("noise: profile %d is of another dataset or pipeline (%d samples, fingerprint %s, pipeline %s; the first: %d, %s, %s)",
				i+2, len(p.Samples), p.Fingerprint, p.Pipeline, n, ps[0].Fingerprint, ps[0].Pipeline)
		}
		for j := range p.Samples {
			if p.Samples[j].ID != ps[0].Samples[j].ID {
				return fmt.Errorf("noise: profile %d lists sample %d where the first lists %d", i+2, p.Samples[j].ID, ps[0].Samples[j].ID)
			}
		}
	}
	planned := make([]*profiler.Profile, len(ps))
	for i, p := range ps {
		planned[i] = profiler.ExpectCosts(p)
	}
	fmt.Fprintf(w, "%d profiles of %d samples (pipeline %s)\n\n", len(ps), n, ps[0].Pipeline)
	fmt.Fprintf(w, "%-40s %9s %9s  %-8s", "cost", "CV median", "CV p90", "costs")
	for _, f := range noiseFractions {
		fmt.Fprintf(w, "  %-22s", fmt.Sprintf("best %.0f%%: bias [range]", f*100))
	}
	fmt.Fprintln(w)
	for _, col := range noiseColumns(ps[0]) {
		med, p90 := spread(ps, col)
		for _, v := range []struct {
			name string
			used []*profiler.Profile
		}{{"recorded", ps}, {"planned", planned}} {
			if v.name == "recorded" {
				fmt.Fprintf(w, "%-40s %9.3f %9.3f  %-8s", col.name, med, p90, v.name)
			} else {
				fmt.Fprintf(w, "%-40s %9s %9s  %-8s", "", "", "", v.name)
			}
			for _, f := range noiseFractions {
				m, lo, hi := selectionBias(ps, v.used, col, f)
				fmt.Fprintf(w, "  %-22s", fmt.Sprintf("%.3f [%.3f, %.3f]", m, lo, hi))
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

// spread is the median and 90th percentile over the samples of the
// coefficient of variation of col's cost across ps.
func spread(ps []*profiler.Profile, col costColumn) (med, p90 float64) {
	var cvs []float64
	for i := range ps[0].Samples {
		var sum, sq float64
		for _, p := range ps {
			c := col.cost(&p.Samples[i])
			sum, sq = sum+c, sq+c*c
		}
		k := float64(len(ps))
		mean := sum / k
		if !(mean > 0) {
			continue
		}
		cvs = append(cvs, math.Sqrt(max(sq/k-mean*mean, 0)*k/(k-1))/mean)
	}
	if len(cvs) == 0 {
		return 0, 0
	}
	sort.Float64s(cvs)
	return cvs[len(cvs)/2], cvs[len(cvs)*9/10]
}

// selectionBias ranks the samples by col's bytes saved per cost in each
// used[a] and costs its best share f in each other recorded ps[b]: the
// mean, least and greatest over the ordered pairs of (b's cost of the
// selection / a's) over (b's total / a's).
func selectionBias(ps, used []*profiler.Profile, col costColumn, f float64) (mean, lo, hi float64) {
	n := len(ps[0].Samples)
	m := max(1, int(f*float64(n)+0.5))
	lo, hi = math.Inf(1), math.Inf(-1)
	pairs := 0
	for a := range used {
		var idx []int
		for i := range n {
			if col.cost(&used[a].Samples[i]) > 0 {
				idx = append(idx, i)
			}
		}
		gain := func(i int) float64 {
			s := &used[a].Samples[i]
			return col.saved(s) / col.cost(s)
		}
		sort.SliceStable(idx, func(x, y int) bool { return gain(idx[x]) > gain(idx[y]) })
		top := idx[:min(m, len(idx))]
		for b := range ps {
			if b == a {
				continue
			}
			var selA, selB, allA, allB float64
			for _, i := range top {
				selA, selB = selA+col.cost(&used[a].Samples[i]), selB+col.cost(&ps[b].Samples[i])
			}
			for _, i := range idx {
				allA, allB = allA+col.cost(&used[a].Samples[i]), allB+col.cost(&ps[b].Samples[i])
			}
			if !(selA > 0 && allB > 0) {
				continue
			}
			r := (selB / selA) / (allB / allA)
			mean += r
			lo, hi = min(lo, r), max(hi, r)
			pairs++
		}
	}
	if pairs == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	return mean / float64(pairs), lo, hi
}
