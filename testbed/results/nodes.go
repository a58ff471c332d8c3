package results

import (
	"fmt"
	"strings"
)

// This file is the report's part for experiments with several storage or
// compute nodes (Results.StorageNodes, Results.ComputeNodes): a line on
// the topology and, per cell, each run's steady epoch split by rank and
// by storage node.

// nodesColumns are the columns of a cell's per-node table.
var nodesColumns = []column{
	{Text: "policy", MD: "policy"},
	{Text: "epoch s", MD: "epoch s (slowest rank)", Right: true},
	{Text: "rank epoch s", MD: "epoch s per rank"},
	{Text: "link MB", MD: "MB sent per storage link"},
	{Text: "agent CPU s", MD: "CPU s per storage agent"},
}

// nodesTable is a cell's per-node rows: each run's steady epoch with its
// ranks' times, its storage links' bytes and its storage agents' CPU, for
// the runs that have them; nil when none has.
func nodesTable(c *Cell) [][]string {
	var rows [][]string
	for i := range c.Runs {
		run := &c.Runs[i]
		e := run.Steady()
		if e == nil || (len(e.RankSeconds) == 0 && len(e.LinkBytes) == 0 && len(e.StorageAgentCPUSeconds) == 0) {
			continue
		}
		row := []string{rowName(run), f2(e.Seconds), none, none, none}
		if len(e.RankSeconds) > 0 {
			row[2] = joinFloats(e.RankSeconds, f2)
		}
		if len(e.LinkBytes) > 0 {
			mbs := make([]string, len(e.LinkBytes))
			for k, b := range e.LinkBytes {
				mbs[k] = mb(b)
			}
			row[3] = strings.Join(mbs, " / ")
		}
		if len(e.StorageAgentCPUSeconds) > 0 {
			row[4] = joinFloats(e.StorageAgentCPUSeconds, f2)
		}
		rows = append(rows, row)
	}
	return rows
}

func joinFloats(v []float64, f func(float64) string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = f(x)
	}
	return strings.Join(s, " / ")
}

// topologyLine is the report's line on the nodes; "" for 1 x 1.
func topologyLine(r *Results) string {
	if r.StorageNodes <= 1 && r.ComputeNodes <= 1 {
		return ""
	}
	s, c := max(r.StorageNodes, 1), max(r.ComputeNodes, 1)
	how := "a star of network namespaces: every node joined to a bridge in a hub namespace, each storage link shaped " +
		"with tc tbf both ways at its rate, compute links unshaped, each storage agent under a CPU quota of its own"
	if r.Mode == ModeLoopback {
		how = "on loopback, each storage agent behind its own in-process token bucket at its link's rate"
	}
	line := fmt.Sprintf("%d storage x %d compute nodes, %s", s, c, how)
	switch {
	case r.Jobs > 1:
		if r.JobLinks {
			line = strings.Replace(line, "compute links unshaped", "each compute link shaped too at the cell's rate, "+
				"the storage link at the jobs' sum (each job a link of its own, all sharing the storage agent's CPU)", 1)
		}
		line += fmt.Sprintf("; the compute agents ran as %d independent jobs (--job job0..job%d), each over the whole "+
			"dataset, sharing the storage agents; an epoch's time is the slowest job's, and exactly-once and the content "+
			"were checked for every job", r.Jobs, r.Jobs-1)
	case c > 1:
		line += fmt.Sprintf("; the compute agents ran as ranks 0..%d of one world, an epoch lasting as long as its "+
			"slowest rank, and exactly-once was checked over all ranks together", c-1)
	}
	return line
}

// placementsLine is the report's line on --placements; "" without.
func placementsLine(r *Results) string {
	if len(r.Placements) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: each policy ran once per placement, every compute agent with --placement P "+
		"(named <policy>-<placement>, but for pull)", strings.Join(r.Placements, ", "))
}

// nodesNote explains a cell's per-node table.
func nodesNote(c *Cell) string {
	rates := ""
	if len(c.StorageRates) > 0 {
		rates = " The storage links ran at " + strings.Join(c.StorageRates, " / ") + "."
	}
	return "**Nodes.** Each run's last epoch by rank and by storage node, in order: the epoch time of each rank " +
		"(the row's is the slowest's), what each storage node sent on its link (its interface's counter, frames " +
		"and headers included; the shaping proxy's bytes on loopback), and each storage agent's CPU time " +
		"(user and system, gRPC and TLS included)." + rates + "\n\n"
}
