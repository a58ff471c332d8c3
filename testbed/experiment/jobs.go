package experiment

import (
	"fmt"
	"strconv"

	"github.com/sophon-dl/sophon/testbed/shape"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/results"
)

// Jobs (Config.Jobs): the compute agents are independent training jobs
// against the cell's storage agents, not ranks of one. Each serves the
// whole dataset, so each is checked on its own: every sample exactly
// once per epoch, and its tensors against the experiment's reference.

// computeApart is how many groups the compute quota is split into: one
// per job with Jobs (each job a machine of its own, whose agent plans with
// its part, as on separate GPU nodes), else 1 (ranks of one job share
// it).
func computeApart(cfg Config) int {
	if cfg.Jobs > 1 {
		return cfg.Jobs
	}
	return 1
}

// wholeBudgetFlag is the compute agent's flag for the "-whole" runs
// (Config.JobsWholeBudget).
const wholeBudgetFlag = "--whole-budget"

// withWhole is runs, each followed by its "-whole" run.
func withWhole(runs []policyRun) []policyRun {
	out := make([]policyRun, 0, 2*len(runs))
	for _, r := range runs {
		w := r
		w.name, w.whole = r.name+"-whole", true
		out = append(out, r, w)
	}
	return out
}

// jobLinks is the storage and compute links of rate point p: p's own
// storage links and unshaped compute links, or with Config.JobLinks one
// link of p's rate per job and the storage link at the jobs' sum.
func (x *experiment) jobLinks(p point) (storage, compute []shape.Rate, err error) {
	if !x.cfg.JobLinks {
		return p.links, nil, nil
	}
	if x.res.Mode != results.ModeNetns {
		return nil, nil, fmt.Errorf("%w: job links need netns mode (root)", ErrConfig)
	}
	r := p.links[0]
	sum, err := shape.ParseRate(strconv.FormatFloat(r.Bits()*float64(x.cfg.Jobs), 'f', 0, 64) + "bit")
	if err != nil {
		return nil, nil, err
	}
	compute = make([]shape.Rate, x.cfg.Jobs)
	for i := range compute {
		compute[i] = r
	}
	return []shape.Rate{sum}, compute, nil
}

// jobName is the --job of compute agent i.
func jobName(i int) string { return "job" + strconv.Itoa(i) }

// checkJobs sets run's ExactlyOnce and ContentMatches from every job's
// reports (ranks[i] is job i's) and sample log (paths[i]): true only when
// every job delivered every sample exactly once per epoch, and with the
// same tensors as the reference (the first exactly-once run's).
func (x *experiment) checkJobs(run *results.Run, ranks [][]report.EpochReport, paths []string) {
	once, match := true, true
	for i := range ranks {
		var one results.Run
		x.checkSamples(&one, ranks[i:i+1], paths[i:i+1], true)
		once, match = once && one.ExactlyOnce, match && one.ContentMatches
	}
	run.ExactlyOnce, run.ContentMatches = once, once && match
}
