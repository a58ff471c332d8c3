package experiment

import (
	"context"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// A rate schedule (Config.RateSchedule) changes the link's rate while
// each policy run's epochs run, the same way in every epoch after the
// first, so that every measured epoch sees the same change. The time
// origin is each epoch's start: the testbed reads the compute agent's
// report every schedulePoll, and a new line (an epoch ended) starts the
// next epoch's schedule, with the link back at the cell's rate; each step
// is then a `tc qdisc change` of every shaped end (netns.Topology.SetRate)
// once its offset has passed, unless the epoch ended first. The first
// epoch (the profiling or overlapped one) runs at the cell's rate. After
// the run, each change's time into its epoch is taken from the epoch's
// start as the agent reported it (results.RateChange.AtSeconds), so the
// poll's lag shows.

// schedulePoll is how often a scheduled run reads the compute agent's
// report for the start of its next epoch.
const schedulePoll = 20 * time.Millisecond

// NoResplitSuffix after a policy's name in Config.Policies runs it with
// the compute agent's --resplit=false: each epoch on one plan, re-planned
// between epochs only, beside the same policy re-splitting within them.
const NoResplitSuffix = "-noresplit"

// noResplit is the compute agent's flag for a NoResplitSuffix run.
const noResplit = "--resplit=false"

// change is one rate change a schedule made: in the epoch of report line
// line, step's rate, at at.
type change struct {
	line int
	step shape.Step
	at   time.Time
}

// followSchedule runs sched on topo beside a policy run whose rank 0
// reports to reportPath until ctx ends (the compute agent exited), and
// returns the changes it made; the link is at base again when it
// returns. log is given each failed change.
func followSchedule(ctx context.Context, topo *netns.Topology, sched shape.Schedule, base shape.Rate, reportPath string, log func(error)) []change {
	var out []change
	cur := base
	set := func(r shape.Rate) bool {
		if r.Bits() == cur.Bits() {
			return false
		}
		// NB: not ctx: the last reset runs after it ended.
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := topo.SetRate(tctx, r); err != nil {
			log(err)
			return false
		}
		cur = r
		return true
	}
	defer set(base)
	tick := time.NewTicker(schedulePoll)
	defer tick.Stop()
	seen, next := 0, len(sched) // no epoch's schedule under way
	var origin time.Time
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		if rs, _ := report.ReadReport(reportPath); len(rs) > seen {
			seen, next, origin = len(rs), 0, time.Now()
			set(base)
		}
		for next < len(sched) && time.Since(origin) >= sched[next].At {
			if set(sched[next].Rate) || sched[next].Rate.Bits() == cur.Bits() {
				out = append(out, change{line: seen, step: sched[next], at: time.Now()})
			}
			next++
		}
	}
}

// rateChanges turns a run's changes into its results, with each one's time
// into its epoch from the agent's report lines rs.
func rateChanges(chs []change, rs []report.EpochReport) []results.RateChange {
	var out []results.RateChange
	for _, ch := range chs {
		rc := results.RateChange{Rate: ch.step.Rate.String(), PlannedSeconds: ch.step.At.Seconds(), AtUnixNS: ch.at.UnixNano()}
		if ch.line >= len(rs) {
			continue // in an epoch the agent never reported
		}
		r := rs[ch.line]
		rc.Epoch = int(r.Epoch)
		if r.StartUnixNS > 0 {
			rc.AtSeconds = float64(rc.AtUnixNS-r.StartUnixNS) / 1e9
		}
		out = append(out, rc)
	}
	return out
}
