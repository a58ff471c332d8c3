package results

import (
	"fmt"
	"strings"
)

// This file is the report's part for experiments with several jobs
// (Results.Jobs): per cell, every epoch of each run split by job, each
// job's time beside its bound for the storage share it planned for.

// jobsColumns are the columns of a cell's per-job table.
var jobsColumns = []column{
	{Text: "policy", MD: "policy"},
	{Text: "epoch", MD: "epoch", Right: true},
	{Text: "share cpus", MD: "storage share (cores) per job"},
	{Text: "job epoch s", MD: "epoch s per job"},
	{Text: "job bound s", MD: "bound s per job (for its share)"},
	{Text: "/ bound", MD: "epoch / bound per job"},
	{Text: "sum s", MD: "sum of the jobs' epochs s", Right: true},
}

// jobsTable is a cell's per-job rows: every epoch of every run that has
// them; nil when none has.
func jobsTable(c *Cell) [][]string {
	var rows [][]string
	for i := range c.Runs {
		run := &c.Runs[i]
		for _, e := range run.Epochs {
			if len(e.RankSeconds) == 0 {
				continue
			}
			sum, ratios := 0.0, make([]string, len(e.RankSeconds))
			for k, s := range e.RankSeconds {
				sum += s
				ratios[k] = none
				if k < len(e.JobBoundSeconds) && e.JobBoundSeconds[k] > 0 {
					ratios[k] = f2(s / e.JobBoundSeconds[k])
				}
			}
			rows = append(rows, []string{rowName(run), fmt.Sprint(e.Epoch), joinFloats(e.JobShareCPUs, f2), joinFloats(e.RankSeconds, f2),
				joinFloats(e.JobBoundSeconds, f2), strings.Join(ratios, " / "), f2(sum)})
		}
	}
	return rows
}

// jobsNote is the markdown paragraph before a cell's per-job table.
func jobsNote(r *Results) string {
	return fmt.Sprintf("Each of the %d jobs (compute-agent --job job0..job%d, each over the whole dataset) per epoch: "+
		"the storage cores it planned for (its share, from its storage agent's Info, share_cpus; the whole budget in a "+
		"-whole row, compute-agent --whole-budget, or with storage-agent --job-shares=false), its epoch, its bound for that share (its report's bound_seconds) and the ratio; "+
		"the sum adds the jobs' epochs.\n\n", r.Jobs, r.Jobs-1)
}
