package experiment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/results"
)

// TestPolicyRuns: the work-conserving setting's and the placements' runs
// of a cell, in order.
func TestPolicyRuns(t *testing.T) {
	policies := []string{"nooff", "sophon", "optimal"}
	both := []string{PlacementPull, PlacementRoundRobin}
	for _, tc := range []struct {
		wc         string
		placements []string
		want       string // name:policy, "!" when without work conserving, "@placement" when passed
	}{
		{WorkConservingOn, nil, "nooff:nooff sophon:sophon optimal:optimal"},
		{WorkConservingOff, nil, "nooff:nooff! sophon:sophon! optimal:optimal!"},
		{WorkConservingBoth, nil, "nooff:nooff sophon:sophon sophon-nowc:sophon! optimal:optimal optimal-nowc:optimal!"},
		{WorkConservingOn, both, "nooff:nooff@pull nooff-round-robin:nooff@round-robin sophon:sophon@pull " +
			"sophon-round-robin:sophon@round-robin optimal:optimal@pull optimal-round-robin:optimal@round-robin"},
		{WorkConservingOn, []string{PlacementRoundRobin}, "nooff-round-robin:nooff@round-robin sophon-round-robin:sophon@round-robin optimal-round-robin:optimal@round-robin"},
		{WorkConservingBoth, both, "nooff:nooff@pull nooff-round-robin:nooff@round-robin sophon:sophon@pull sophon-round-robin:sophon@round-robin " +
			"sophon-nowc:sophon!@pull sophon-nowc-round-robin:sophon!@round-robin optimal:optimal@pull optimal-round-robin:optimal@round-robin " +
			"optimal-nowc:optimal!@pull optimal-nowc-round-robin:optimal!@round-robin"},
	} {
		var got []string
		for _, r := range policyRuns(policies, tc.wc, tc.placements) {
			s := r.name + ":" + r.policy
			if r.noWC {
				s += "!"
			}
			if r.placement != "" {
				s += "@" + r.placement
			}
			got = append(got, s)
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%s %v:\ngot  %v\nwant %v", tc.wc, tc.placements, g, tc.want)
		}
	}
}

// flagValue is the value after flag name in args ("" when absent), and
// how often the flag occurs.
func flagValue(args []string, name string) (string, int) {
	v, n := "", 0
	for i, a := range args {
		if a == name && i+1 < len(args) {
			v, n = args[i+1], n+1
		}
	}
	return v, n
}

// TestPolicyArgs: the compute agent's command line; "on" passes no
// work-conserving flag at all (agents without it still run), the nowc
// runs pass --work-conserving=false, before the user's extra flags so
// those win. Without placements no --placement flag is passed (today's
// agents run); with them each run passes its own.
func TestPolicyArgs(t *testing.T) {
	x := &experiment{cfg: Config{Epochs: 4, Pipeline: "imagenet-train", GPURate: 100, Seed: 3, Batch: 16, ComputeNodes: 1,
		ComputeFlags: []string{"--window", "8"}}, cellProfile: "/out/profile.zst", computeTLS: [][]string{{"--insecure"}}}
	for _, wc := range []string{WorkConservingOn, WorkConservingOff, WorkConservingBoth} {
		for _, placements := range [][]string{nil, Placements} {
			for _, r := range policyRuns([]string{"nooff", "sophon"}, wc, placements) {
				args := x.policyArgs([]string{"10.0.0.1:7070"}, r, 0, "/out/c/"+r.name+".jsonl", "/out/c/"+r.name+".samples")
				line := strings.Join(args, " ")
				for _, want := range []string{"--storage 10.0.0.1:7070", "--policy " + r.policy, "--epochs 4",
					"--profile /out/profile.zst --force-profile", "--gpu sim:100", "--seed 3", "--batch 16",
					"--report /out/c/" + r.name + ".jsonl", "--samples-out /out/c/" + r.name + ".samples", "--insecure"} {
					if !strings.Contains(line, want) {
						t.Errorf("%s %s: args lack %q: %s", wc, r.name, want, line)
					}
				}
				if !strings.HasSuffix(line, "--window 8") {
					t.Errorf("%s %s: the extra flags are not last: %s", wc, r.name, line)
				}
				wantOff := wc == WorkConservingOff || strings.Contains(r.name, "-nowc")
				if got := slices.Contains(args, "--work-conserving=false"); got != wantOff {
					t.Errorf("%s %s: --work-conserving=false passed %v, want %v: %s", wc, r.name, got, wantOff, line)
				}
				if n := strings.Count(line, "work-conserving"); n > 1 || (!wantOff && n > 0) {
					t.Errorf("%s %s: %d work-conserving flags: %s", wc, r.name, n, line)
				}
				pl, n := flagValue(args, "--placement")
				switch {
				case placements == nil && strings.Contains(line, "placement"):
					t.Errorf("%s %s: a placement flag without --placements: %s", wc, r.name, line)
				case placements != nil && (n != 1 || pl != r.placement):
					t.Errorf("%s %s: --placement %q (%d times), want %q once: %s", wc, r.name, pl, n, r.placement, line)
				}
				if strings.Contains(line, "--rank") || strings.Contains(line, "--world") {
					t.Errorf("%s %s: rank flags with one compute agent: %s", wc, r.name, line)
				}
			}
		}
	}
}

// TestPolicyArgsRanks: with several compute agents each rank gets --rank
// and --world, its own profile, report, samples and TLS identity, and
// every storage agent.
func TestPolicyArgsRanks(t *testing.T) {
	x := &experiment{cfg: Config{Epochs: 2, Pipeline: "imagenet-train", GPURate: 100, ComputeNodes: 3},
		cellProfile: "/out/profile-100mbit-cpu1.zst",
		computeTLS:  [][]string{{"--name", "compute-1"}, {"--name", "compute-2"}, {"--name", "compute-3"}}}
	r := policyRuns([]string{"optimal"}, WorkConservingOn, []string{PlacementRoundRobin})[0]
	for rank := range 3 {
		f := x.rankFiles("/out/c", r.name, rank)
		args := x.policyArgs([]string{"10.0.0.1:7070", "10.0.0.2:7070"}, r, rank, f.report, f.samples)
		for flag, want := range map[string]string{
			"--storage":     "10.0.0.1:7070,10.0.0.2:7070",
			"--rank":        strconv.Itoa(rank),
			"--world":       "3",
			"--profile":     fmt.Sprintf("/out/profile-100mbit-cpu1-rank%d.zst", rank),
			"--report":      fmt.Sprintf("/out/c/optimal-round-robin-rank%d.jsonl", rank),
			"--samples-out": fmt.Sprintf("/out/c/optimal-round-robin-rank%d.samples", rank),
			"--name":        fmt.Sprintf("compute-%d", rank+1),
			"--placement":   "round-robin",
		} {
			if got, n := flagValue(args, flag); got != want || n != 1 {
				t.Errorf("rank %d: %s %q (%d times), want %q once: %v", rank, flag, got, n, want, args)
			}
		}
		if f.log != fmt.Sprintf("/out/c/optimal-round-robin-rank%d.log", rank) {
			t.Errorf("rank %d: log %s", rank, f.log)
		}
	}
	// One compute agent: today's file names.
	x.cfg.ComputeNodes = 1
	if f := x.rankFiles("/out/c", "sophon", 0); f != (rankFiles{"/out/c/sophon.jsonl", "/out/c/sophon.samples", "/out/c/sophon.log"}) {
		t.Errorf("1 x 1 files: %+v", f)
	}
}

func TestConfigNewOptions(t *testing.T) {
	base := func() Config { return Config{Data: "x", Out: "x"} }
	c := base()
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.WorkConserving != WorkConservingOn || c.Repeat != 1 || c.ContendThreads != 1 || c.ContendAt != 0 {
		t.Errorf("defaults: work conserving %q, repeat %d, contend threads %d, at %v", c.WorkConserving, c.Repeat, c.ContendThreads, c.ContendAt)
	}
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"contend-at 1", func(c *Config) { c.ContendAt = 1 }},
		{"contend-at negative", func(c *Config) { c.ContendAt = -0.1 }},
		{"contend threads", func(c *Config) { c.ContendThreads = -2 }},
		{"work conserving", func(c *Config) { c.WorkConserving = "sometimes" }},
		{"repeat", func(c *Config) { c.Repeat = -1 }},
	} {
		c := base()
		tc.set(&c)
		if err := c.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", tc.name, err)
		}
	}
}

func TestContendAfter(t *testing.T) {
	for _, tc := range []struct {
		at     float64
		epochs int
		want   int
	}{
		{0.5, 4, 2}, {0.5, 3, 1}, {0.1, 4, 0}, {0.75, 4, 3}, {0.99, 4, 3}, {0.34, 3, 1},
	} {
		x := &experiment{cfg: Config{ContendAt: tc.at, Epochs: tc.epochs}}
		if got := x.contendAfter(); got != tc.want {
			t.Errorf("contend-at %v of %d epochs: got %d, want %d", tc.at, tc.epochs, got, tc.want)
		}
	}
}

// TestStage1Resources: the reduced-CPU prediction plans with stage 1's
// link, GPU and speed, the storage cores the hog left (never 0, which
// means unlimited) and the agent's workers.
func TestStage1Resources(t *testing.T) {
	s := report.Stage1Summary{LinkBytesPerSec: 12.5e6, GPUSamplesPerSec: 1e5, StorageSpeed: 0.9, ComputeSamplesPerSec: 50}
	r := stage1Resources(s, 0.4, 2)
	if r.LinkBytesPerSec != 12.5e6 || r.GPUSamplesPerSec != 1e5 || r.StorageSpeed != 0.9 || r.StorageCores != 0.4 || r.ComputeCores != 2 {
		t.Errorf("got %+v", r)
	}
	if r := stage1Resources(s, -0.1, 2); r.StorageCores <= 0 {
		t.Errorf("no cores left: StorageCores %v, want a small positive share", r.StorageCores)
	}

}

func TestCellDir(t *testing.T) {
	for _, tc := range []struct {
		rate string
		cpus float64
		rep  int
		want string
	}{
		{"100mbit", 0.5, 0, "100mbit-cpu0.5"},
		{"100mbit", 1, 2, "100mbit-cpu1-rep2"},
	} {
		if got := cellDir(tc.rate, tc.cpus, tc.rep); got != tc.want {
			t.Errorf("%s: got %v, want %v", fmt.Sprint(tc.rate, tc.cpus, tc.rep), got, tc.want)
		}
	}
}

// TestCacheArgs: with a cache budget every run gets its own fresh cache
// directory and the budget; the lru row runs No-Off with the LRU policy.
// Budgets parse as bytes or a percentage of the dataset.
func TestCacheArgs(t *testing.T) {
	out := t.TempDir()
	x := &experiment{cfg: Config{Epochs: 2, Pipeline: "imagenet-train", GPURate: 100, ComputeNodes: 1}, cellProfile: "/p",
		computeTLS: [][]string{{"--insecure"}}, res: &results.Results{CacheBytes: 1000}}
	for _, r := range policyRuns([]string{"nooff", PolicyLRU, "sophon"}, WorkConservingOn, nil) {
		report := filepath.Join(out, r.name+".jsonl")
		os.MkdirAll(cacheDirOf(report), 0o700)
		os.WriteFile(filepath.Join(cacheDirOf(report), "stale.entry"), []byte("x"), 0o600)
		args := x.policyArgs([]string{"10.0.0.1:7070"}, r, 0, report, "s")
		dir, _ := flagValue(args, "--cache-dir")
		budget, _ := flagValue(args, "--cache-bytes")
		pol, n := flagValue(args, "--cache-policy")
		agentPol, _ := flagValue(args, "--policy")
		if dir != cacheDirOf(report) || budget != "1000" {
			t.Errorf("%s: --cache-dir %q --cache-bytes %q", r.name, dir, budget)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s: the run's cache was not emptied", r.name)
		}
		if wantLRU := r.policy == PolicyLRU; wantLRU != (n == 1 && pol == "lru") || agentPol != r.policy {
			t.Errorf("%s: --policy %s --cache-policy %q", r.name, agentPol, pol)
		}
	}
	x.res.CacheBytes = 0
	if line := strings.Join(x.policyArgs([]string{"a:1"}, policyRun{name: "nooff", policy: "nooff"}, 0, "r.jsonl", "s"), " "); strings.Contains(line, "cache") {
		t.Errorf("cache flags without a budget: %s", line)
	}
	for in, want := range map[string]int64{"25%": 250, "64MiB": 64 << 20, "100%": 1000, "1000": 1000} {
		if got, err := ParseCacheBytes(in, 1000); err != nil || got != want {
			t.Errorf("ParseCacheBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0%", "x%", "-5", "lots"} {
		if _, err := ParseCacheBytes(in, 1000); err == nil {
			t.Errorf("ParseCacheBytes(%q) accepted", in)
		}
	}
	if err := (&Config{Data: "d", Out: "o", Policies: []string{PolicyLRU}}).defaults(); err == nil {
		t.Error("the lru row accepted without a cache budget")
	}
	// No --policies: every policy, lru only with a cache budget (make demo
	// runs the default without one).
	for budget, want := range map[string]bool{"": false, "25%": true} {
		c := Config{Data: "d", Out: "o", CacheBytes: budget}
		if err := c.defaults(); err != nil || slices.Contains(c.Policies, PolicyLRU) != want || len(c.Policies) < 3 {
			t.Errorf("cache bytes %q: default policies %v, %v; lru wanted %v", budget, c.Policies, err, want)
		}
	}
}

// TestPolicyArgsEst: a "<policy>-est" row runs the policy without a saved
// profile: its own profile path beside its report (which runPolicy
// removes first) and no --force-profile, so the agent plans from header
// estimates.
func TestPolicyArgsEst(t *testing.T) {
	x := &experiment{cfg: Config{Epochs: 4, Pipeline: "imagenet-train", GPURate: 100, Seed: 3, ComputeNodes: 1},
		cellProfile: "/out/profile.zst", computeTLS: [][]string{{"--insecure"}}}
	runs := policyRuns([]string{"optimal", "optimal-est"}, WorkConservingOn, nil)
	if len(runs) != 2 || runs[1].name != "optimal-est" || runs[1].policy != "optimal" || !runs[1].est || runs[0].est {
		t.Fatalf("runs %+v", runs)
	}
	line := strings.Join(x.policyArgs([]string{"10.0.0.1:7070"}, runs[1], 0, "/out/c/optimal-est.jsonl", "/out/c/optimal-est.samples"), " ")
	if !strings.Contains(line, "--policy optimal ") || !strings.Contains(line, "--profile /out/c/optimal-est.fresh-profile.zst") ||
		strings.Contains(line, "force-profile") || strings.Contains(line, "/out/profile.zst") {
		t.Errorf("args %s: want --policy optimal with a fresh profile and no --force-profile", line)
	}
	for _, c := range []Config{{Policies: []string{"optimal-est"}, TrainPolicy: "nooff-est"}, {Policies: []string{"fast-est"}}} {
		c.Data, c.Out = "d", "o"
		if err := c.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("policies %v, train policy %q: %v, want ErrConfig", c.Policies, c.TrainPolicy, err)
		}
	}
	c := Config{Data: "d", Out: "o", Policies: []string{"nooff", "sophon-est"}, TrainPolicy: "optimal-est"}
	if err := c.defaults(); err != nil {
		t.Error(err)
	}
}
