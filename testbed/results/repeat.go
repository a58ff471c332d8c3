package results

import (
	"slices"
	"strconv"
	"strings"
)

// SophonTolerance is how much slower than sophon optimal may be in a
// repetition before the Repeatability table flags it: optimal plans with
// the same measurements and should never lose by more than noise.
const SophonTolerance = 0.03

// Repeatability is one policy's steady-state epoch time over the
// repetitions of one grid point (`testbed run --repeat N`).
type Repeatability struct {
	Rate        string  `json:"rate"`
	StorageCPUs float64 `json:"storage_cpus"`
	Policy      string  `json:"policy"`
	// Seconds is the steady-state epoch of each repetition, in order; 0
	// where the run was skipped, failed or is missing, which the figures
	// below leave out. Runs counts the others.
	Seconds []float64 `json:"seconds"`
	Runs    int       `json:"runs"`
	Mean    float64   `json:"mean"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	// Spread is (Max - Min) / Mean: 0.05 means the repetitions lie within
	// 5% of their mean's width.
	Spread float64 `json:"spread"`
	// OverSophon, on optimal's row (and optimal-nowc's, against
	// sophon-nowc), is per repetition optimal's steady epoch over sophon's
	// in the same repetition, 0 where either is missing;
	// SlowerThanSophon is true when one is above 1 + SophonTolerance.
	OverSophon       []float64 `json:"over_sophon,omitempty"`
	SlowerThanSophon bool      `json:"slower_than_sophon,omitempty"`
}

// Repeatabilities aggregates the repetitions of each grid point of r: a
// row per policy (and the peer; not the training rows) in order of first
// appearance, grid points in the order of r.Cells. Nil when no grid point
// ran more than once.
func Repeatabilities(r *Results) []Repeatability {
	type point struct {
		rate string
		cpus float64
	}
	var order []point
	groups := map[point][]*Cell{}
	for i := range r.Cells {
		c := &r.Cells[i]
		p := point{c.Link(), c.StorageCPUs}
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], c)
	}
	var out []Repeatability
	for _, p := range order {
		cells := groups[p]
		if len(cells) < 2 {
			continue
		}
		var policies []string
		for _, c := range cells {
			for j := range c.Runs {
				if run := &c.Runs[j]; !run.Training && !slices.Contains(policies, rowName(run)) {
					policies = append(policies, rowName(run)) // "optimal [PIPELINE]" with several
				}
			}
		}
		steady := func(c *Cell, policy string) float64 {
			for j := range c.Runs {
				if run := &c.Runs[j]; rowName(run) == policy && chartable(run) {
					return run.Steady().Seconds
				}
			}
			return 0
		}
		for _, policy := range policies {
			row := Repeatability{Rate: p.rate, StorageCPUs: p.cpus, Policy: policy, Seconds: make([]float64, len(cells))}
			var sum float64
			for k, c := range cells {
				v := steady(c, policy)
				row.Seconds[k] = v
				if v <= 0 {
					continue
				}
				if row.Runs == 0 || v < row.Min {
					row.Min = v
				}
				row.Max = max(row.Max, v)
				sum += v
				row.Runs++
			}
			if row.Runs > 0 {
				row.Mean = sum / float64(row.Runs)
				row.Spread = (row.Max - row.Min) / row.Mean
			}
			if rest, ok := strings.CutPrefix(policy, "optimal"); ok && slices.Contains(policies, "sophon"+rest) {
				row.OverSophon = make([]float64, len(cells))
				for k, c := range cells {
					o, s := steady(c, policy), steady(c, "sophon"+rest)
					if o > 0 && s > 0 {
						row.OverSophon[k] = o / s
						row.SlowerThanSophon = row.SlowerThanSophon || o/s > 1+SophonTolerance
					}
				}
			}
			out = append(out, row)
		}
	}
	return out
}

// repeatColumns are the columns of the Repeatability table.
var repeatColumns = []column{
	{Text: "cell", MD: "cell"},
	{Text: "policy", MD: "policy"},
	{Text: "steady s per rep", MD: "steady epoch s per repetition"},
	{Text: "mean s", MD: "mean s", Right: true},
	{Text: "spread %", MD: "spread (max-min)/mean %", Right: true},
	{Text: "vs sophon per rep", MD: "vs sophon per repetition"},
	{Text: "slower >3%", MD: "more than 3% slower than sophon"},
}

// repeatTable is the Repeatability table's rows: r.Repeatability, or
// Repeatabilities(r) when that is empty (results written before it).
func repeatTable(r *Results) [][]string {
	rows := r.Repeatability
	if len(rows) == 0 {
		rows = Repeatabilities(r)
	}
	var out [][]string
	for _, x := range rows {
		row := []string{x.Rate + ", " + cpusString(x.StorageCPUs) + " storage CPUs", x.Policy, "", none, none, none, none}
		secs := make([]string, len(x.Seconds))
		for k, v := range x.Seconds {
			secs[k] = none
			if v > 0 {
				secs[k] = f2(v)
			}
		}
		row[2] = strings.Join(secs, " ")
		if x.Runs > 0 {
			row[3] = f2(x.Mean)
			row[4] = strconv.FormatFloat(x.Spread*100, 'f', 1, 64)
		}
		if len(x.OverSophon) > 0 {
			vs := make([]string, len(x.OverSophon))
			for k, v := range x.OverSophon {
				vs[k] = none
				if v > 0 {
					vs[k] = strconv.FormatFloat((v-1)*100, 'f', 1, 64) + "%"
					if v >= 1 {
						vs[k] = "+" + vs[k]
					}
				}
			}
			row[5] = strings.Join(vs, " ")
			row[6] = "no"
			if x.SlowerThanSophon {
				row[6] = "YES"
			}
		}
		out = append(out, row)
	}
	return out
}
