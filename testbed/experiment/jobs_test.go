package experiment

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// TestConfigJobs: --jobs M takes M compute nodes, refuses another count
// of them, and --jobs-whole-budget needs jobs.
func TestConfigJobs(t *testing.T) {
	c := Config{Data: "x", Out: "x", Jobs: 2}
	if err := c.defaults(); err != nil || c.ComputeNodes != 2 {
		t.Fatalf("jobs 2: %v, %d compute nodes, want 2", err, c.ComputeNodes)
	}
	for name, cfg := range map[string]Config{
		"3 nodes for 2 jobs":        {Jobs: 2, ComputeNodes: 3},
		"whole budget without jobs": {JobsWholeBudget: true},
		"whole budget with one job": {Jobs: 1, JobsWholeBudget: true},
		"job links without jobs":    {JobLinks: true},
		"job links on two storage":  {Jobs: 2, JobLinks: true, StorageNodes: 2},
	} {
		cfg.Data, cfg.Out = "x", "x"
		if err := cfg.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// TestPolicyArgsJobs: each job's agent gets its own --job and no rank
// flags; a "-whole" run adds --whole-budget after each run.
func TestPolicyArgsJobs(t *testing.T) {
	x := &experiment{cfg: Config{Epochs: 2, Pipeline: "imagenet-train", GPURate: 100, ComputeNodes: 2, Jobs: 2, JobsWholeBudget: true},
		cellProfile: "/out/profile.zst", computeTLS: [][]string{nil, nil}}
	runs := withWhole(policyRuns([]string{"nooff", "optimal"}, WorkConservingOn, nil))
	var names []string
	for _, r := range runs {
		names = append(names, r.name)
	}
	if got := strings.Join(names, ","); got != "nooff,nooff-whole,optimal,optimal-whole" {
		t.Fatalf("runs %s", got)
	}
	for _, r := range runs {
		for job := range 2 {
			f := x.rankFiles("/out/c", r.name, job)
			args := x.policyArgs([]string{"10.0.0.1:7070"}, r, job, f.report, f.samples)
			if got, n := flagValue(args, "--job"); got != jobName(job) || n != 1 {
				t.Errorf("%s job %d: --job %q (%d times), want %q: %v", r.name, job, got, n, jobName(job), args)
			}
			line := strings.Join(args, " ")
			if strings.Contains(line, "--rank") || strings.Contains(line, "--world") {
				t.Errorf("%s job %d: rank flags for a job: %s", r.name, job, line)
			}
			if strings.Contains(line, wholeBudgetFlag) != r.whole {
				t.Errorf("%s job %d: %s %v times, want %v: %s", r.name, job, wholeBudgetFlag, !r.whole, r.whole, line)
			}
		}
	}
}

// TestCheckJobs: every job must deliver the whole dataset once per epoch
// with the reference's tensors; one job short of a sample, or with
// another tensor, fails the run's checks.
func TestCheckJobs(t *testing.T) {
	dir := t.TempDir()
	const epochs, total = 2, 4
	hash := func(e, id int) string { return "h" + string(rune('0'+e)) + string(rune('0'+id)) }
	file := func(name string, ids []int, h func(e, id int) string) string {
		p := filepath.Join(dir, name)
		writeSamples(t, p, epochs, ids, h)
		return p
	}
	reports := func(perJob ...int) [][]report.EpochReport {
		var out [][]report.EpochReport
		for _, n := range perJob {
			var rs []report.EpochReport
			for e := range epochs {
				rs = append(rs, report.EpochReport{Epoch: uint64(e), Samples: n})
			}
			out = append(out, rs)
		}
		return out
	}
	all := []int{0, 1, 2, 3}
	a, b := file("a", all, hash), file("b", all, hash)
	short := file("short", []int{0, 1, 2}, hash)
	other := file("other", all, func(e, id int) string {
		if id == 2 {
			return "other"
		}
		return hash(e, id)
	})
	for name, tc := range map[string]struct {
		files         []string
		reports       [][]report.EpochReport
		once, content bool
	}{
		"both whole":     {[]string{a, b}, reports(total, total), true, true},
		"one short":      {[]string{a, short}, reports(total, total-1), false, false},
		"another tensor": {[]string{a, other}, reports(total, total), true, false},
	} {
		x := &experiment{cfg: Config{Epochs: epochs, Jobs: 2}, res: &results.Results{Dataset: results.Dataset{Samples: total}}, ref: map[[2]uint64]string{}}
		var run results.Run
		x.checkJobs(&run, tc.reports, tc.files)
		if run.ExactlyOnce != tc.once || run.ContentMatches != tc.content {
			t.Errorf("%s: exactly once %v, content %v; want %v, %v", name, run.ExactlyOnce, run.ContentMatches, tc.once, tc.content)
		}
	}
}

// TestJobLinks: with job links each job gets a link of the cell's rate
// and the storage link their sum; without, the point's own links.
func TestJobLinks(t *testing.T) {
	r := shape.MustParseRate("100mbit")
	p := point{label: "100mbit", bits: r.Bits(), links: []shape.Rate{r}}
	x := &experiment{cfg: Config{Jobs: 3}, res: &results.Results{Mode: results.ModeNetns}}
	if s, c, err := x.jobLinks(p); err != nil || len(s) != 1 || s[0] != r || c != nil {
		t.Fatalf("shared link: storage %v, compute %v, %v", s, c, err)
	}
	x.cfg.JobLinks = true
	s, c, err := x.jobLinks(p)
	if err != nil || len(s) != 1 || s[0].Bits() != 300e6 || len(c) != 3 || c[2] != r {
		t.Fatalf("job links: storage %v, compute %v, %v; want 300 Mbit/s and 3 x 100mbit", s, c, err)
	}
	x.res.Mode = results.ModeLoopback
	if _, _, err := x.jobLinks(p); !errors.Is(err, ErrConfig) {
		t.Fatalf("job links on loopback: %v, want ErrConfig", err)
	}
}
