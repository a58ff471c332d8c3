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
}
