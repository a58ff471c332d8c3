package results

import (
	"fmt"
	"strconv"
	"strings"
)

// RateChange is one change of the link's rate that the rate schedule made
// in a policy run (Run.RateChanges).
type RateChange struct {
	// Epoch is the compute agent's number of the epoch it fell in.
	Epoch int `json:"epoch"`
	// Rate is the rate the link went to, as the schedule gives it.
	Rate string `json:"rate"`
	// PlannedSeconds is the step's offset from the epoch's start;
	// AtSeconds when tc changed the rate, from the epoch's start as the
	// compute agent reported it (0 where its report has no start).
	PlannedSeconds float64 `json:"planned_seconds"`
	AtSeconds      float64 `json:"at_seconds"`
	// AtUnixNS is when tc changed the rate (Unix ns).
	AtUnixNS int64 `json:"at_unix_ns"`
}

// scheduleColumns are the columns of the Rate schedule table.
var scheduleColumns = []column{
	{Text: "cell", MD: "cell"},
	{Text: "policy", MD: "policy"},
	{Text: "epoch", MD: "epoch", Right: true},
	{Text: "s", MD: "epoch s", Right: true},
	{Text: "pred s", MD: "predicted s", Right: true},
	{Text: "rate changes", MD: "rate changes (rate @ s into the epoch)"},
	{Text: "re-splits", MD: "re-splits (kind @ s: MB/s measured of the plan's, new plan's MB/s, its predicted s left)"},
}

// scheduleTable is a row per epoch of every policy run with a rate change
// or a re-split, in cell order; nil when there is none.
func scheduleTable(r *Results) [][]string {
	var rows [][]string
	for i := range r.Cells {
		c := &r.Cells[i]
		for j := range c.Runs {
			run := &c.Runs[j]
			for _, e := range run.Epochs {
				var changes, splits []string
				for _, ch := range run.RateChanges {
					if ch.Epoch == e.Epoch {
						changes = append(changes, fmt.Sprintf("%s @ %s", ch.Rate, f2(ch.AtSeconds)))
					}
				}
				for _, rs := range e.Resplits {
					splits = append(splits, fmt.Sprintf("%s @ %s: %s of %s, new %s, %s left", rs.Kind, f2(rs.AtSeconds),
						f2(rs.MeasuredBytesPerSec/1e6), f2(rs.PlanBytesPerSec/1e6), f2(rs.NewBytesPerSec/1e6), f2(rs.PredictedRemainingSeconds)))
				}
				if len(changes) == 0 && len(splits) == 0 {
					continue
				}
				rows = append(rows, []string{cellLabel(c), rowName(run), strconv.Itoa(e.Epoch), f2(e.Seconds), f2(e.PredictedSeconds),
					orDash(strings.Join(changes, "; ")), orDash(strings.Join(splits, "; "))})
			}
		}
	}
	return rows
}

// orDash is s, or a dash for nothing.
func orDash(s string) string {
	if s == "" {
		return none
	}
	return s
}

// writeSchedule writes the Rate schedule section, when there is one.
func writeSchedule(b *strings.Builder, r *Results) {
	rows := scheduleTable(r)
	if r.RateSchedule == "" && len(rows) == 0 {
		return
	}
	b.WriteString("\n## Rate schedule\n\n")
	if r.RateSchedule != "" {
		fmt.Fprintf(b, "The link's rate followed `%s` in every epoch of each policy run after the first: offsets from the "+
			"epoch's start, which the testbed takes from the compute agent's report of the epoch before (its next "+
			"epoch starts then), each step a `tc qdisc change` of both ends' tbf; each epoch starts at the cell's rate. "+
			"*Rate changes* are when tc changed it, from the epoch's start as the agent reported it. ", r.RateSchedule)
	}
	b.WriteString("*Re-splits* are the compute agent's changes of plan within the epoch (--resplit): *link* a plan for " +
		"the rate it measured over the last second, *probe* the epoch's first plan tried again after a re-split down, " +
		"*revert* the plan before a probe that found the link still slow; each with the rate measured and the one the " +
		"new plan was made for (MB/s), and the new plan's predicted time for the positions left. A \"-noresplit\" row " +
		"ran the same policy with --resplit=false.\n\n")
	if len(rows) > 0 {
		writeMarkdownTable(b, scheduleColumns, rows)
	}
	if why := resplitReasons(r); len(why) > 0 {
		b.WriteString("\nWhy each re-split happened, as the compute agent gave it:\n\n")
		for _, w := range why {
			b.WriteString("- " + w + "\n")
		}
	}
	if rows := resplitGainTable(r); len(rows) > 0 {
		b.WriteString("\nSide by side: each policy that re-split against its \"-noresplit\" row in the same cell, over the " +
			"epochs the schedule changed the rate in (every repetition): the mean epoch time of each, the re-split's " +
			"change (- is faster), and in how many of the pairs (same repetition, same epoch) the re-split was faster. " +
			"A run that profiled is left out with its pair (the cell's first run profiles; use --repeat 2 or more).\n\n")
		writeMarkdownTable(b, gainColumns, rows)
	}
}

// resplitReasons is a line per re-split: where, when, and the agent's
// reason.
func resplitReasons(r *Results) []string {
	var out []string
	for i := range r.Cells {
		c := &r.Cells[i]
		for j := range c.Runs {
			for _, e := range c.Runs[j].Epochs {
				for _, rs := range e.Resplits {
					out = append(out, fmt.Sprintf("%s, %s, epoch %d, %s @ %s s: %s", cellLabel(c), rowName(&c.Runs[j]), e.Epoch, rs.Kind, f2(rs.AtSeconds), rs.Reason))
				}
			}
		}
	}
	return out
}

// gainColumns are the columns of the side-by-side table.
var gainColumns = []column{
	{Text: "cell", MD: "cell"},
	{Text: "policy", MD: "policy"},
	{Text: "epochs", MD: "epochs with a rate change", Right: true},
	{Text: "re-split s", MD: "mean epoch s, re-split", Right: true},
	{Text: "noresplit s", MD: "mean epoch s, -noresplit", Right: true},
	{Text: "change %", MD: "change %", Right: true},
	{Text: "faster", MD: "re-split faster in", Right: true},
}

// gainKey is a policy in a cell, over its repetitions.
type gainKey struct {
	rate   string
	cpus   float64
	policy string
}

// scheduledEpochs is the seconds of each of run's epochs that the rate
// schedule changed the rate in, by repetition and epoch; none from a run
// that profiled (its next epochs run on a plan its later epochs
// recalibrate, slower or faster than the other row's for that alone).
func scheduledEpochs(c *Cell, run *Run, into map[[2]int]float64) {
	changed := map[int]bool{}
	for _, ch := range run.RateChanges {
		changed[ch.Epoch] = true
	}
	for _, e := range run.Epochs {
		if e.Profiled {
			return
		}
	}
	for _, e := range run.Epochs {
		if changed[e.Epoch] {
			into[[2]int{c.Repetition, e.Epoch}] = e.Seconds
		}
	}
}

// resplitGainTable is a row per policy with a "-noresplit" row in the
// same cell, over the epochs with a rate change in both; nil when none.
func resplitGainTable(r *Results) [][]string {
	epochs := map[gainKey]map[[2]int]float64{}
	var order []gainKey
	for i := range r.Cells {
		c := &r.Cells[i]
		for j := range c.Runs {
			k := gainKey{c.Rate, c.StorageCPUs, c.Runs[j].Policy}
			if epochs[k] == nil {
				epochs[k] = map[[2]int]float64{}
				order = append(order, k)
			}
			scheduledEpochs(c, &c.Runs[j], epochs[k])
		}
	}
	var rows [][]string
	for _, k := range order {
		off := epochs[gainKey{k.rate, k.cpus, k.policy + "-noresplit"}]
		var on, no float64
		n, faster := 0, 0
		for at, s := range epochs[k] {
			if o, ok := off[at]; ok {
				on, no, n = on+s, no+o, n+1
				if s < o {
					faster++
				}
			}
		}
		if n == 0 {
			continue
		}
		rows = append(rows, []string{fmt.Sprintf("%s, %s storage CPUs", k.rate, cpusString(k.cpus)), k.policy, strconv.Itoa(n),
			f2(on / float64(n)), f2(no / float64(n)), fmt.Sprintf("%+.1f", 100*(on-no)/no), fmt.Sprintf("%d of %d", faster, n)})
	}
	return rows
}
