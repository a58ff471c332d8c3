package budget

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Shares of the budget among jobs.
//
// A storage agent serves several training jobs at once. Each job is told
// its share of the CPU budget (InfoResponse.share_cpus) and plans for it,
// and the fair queue serves the jobs in proportion to the same weights, so
// that what each job planned is what it gets. A job is named by its
// compute agents (every rank and connection of one job sends the same
// name); the weights are the operator's (storage-agent --job-weights,
// 1 for a job it does not name), never the client's. A job is active
// while it has a Fetch stream open, or asked for Info or a sample within
// the last Window, unless it said it was leaving (Leave) and has no stream
// open; the share of a job is
//
//	cpus x weight / (sum of the active jobs' weights)
//
// counting the asking job as active. Jobs bounds the active jobs it
// tracks (Max): a Fetch stream of a new job beyond that is refused
// (ErrTooManyJobs), so a client that makes up names cannot grow the
// agent's state, only spread the one budget thinner.

// ErrTooManyJobs refuses a stream of a new job while Max jobs are active.
var ErrTooManyJobs = errors.New("budget: too many active jobs")

// Job-share defaults (JobsConfig's zero fields).
const (
	DefaultJobWindow = 30 * time.Second
	DefaultMaxJobs   = 64
)

// JobsConfig configures the shares.
type JobsConfig struct {
	// CPUs is the budget the shares divide.
	CPUs float64
	// Weights are the operator's weights by job name; a job not named
	// here weighs 1. Weights must be positive.
	Weights map[string]float64
	// Window is how long a job without an open stream stays active
	// after its last request or Info. Zero means DefaultJobWindow.
	Window time.Duration
	// Max bounds the active jobs. Zero means DefaultMaxJobs.
	Max int
	// Off tells every job the whole budget (the agent as before shares:
	// each job plans as if the budget were its own). The fair queue
	// still weighs the jobs.
	Off bool
}

// Share is what a job is told of the budget.
type Share struct {
	// CPUs is the job's share of the budget now (the whole budget with
	// JobsConfig.Off).
	CPUs float64
	// Jobs is the active jobs, the asking one included.
	Jobs int
	// Weight is the job's weight, Total the active jobs' weights.
	Weight, Total float64
}

// ShareOf is a job's share of cpus: its weight over the total weight of
// the active jobs (its own included). Zero when total is not positive.
func ShareOf(cpus, weight, total float64) float64 {
	if !(total > 0) || !(weight > 0) {
		return 0
	}
	return cpus * min(weight/total, 1)
}

// Jobs is the registry of the jobs an agent serves. Its methods are safe
// for concurrent use.
type Jobs struct {
	cfg JobsConfig

	mu   sync.Mutex
	jobs map[string]*jobState
}

// jobState is what the registry knows of one job.
type jobState struct {
	streams int       // open Fetch streams
	last    time.Time // its last request, Info or stream close
	left    bool      // it said it was leaving: gone once streams is 0
}

// NewJobs returns the registry of cfg, after checking it.
func NewJobs(cfg JobsConfig) (*Jobs, error) {
	if cfg.Window == 0 {
		cfg.Window = DefaultJobWindow
	}
	if cfg.Max == 0 {
		cfg.Max = DefaultMaxJobs
	}
	if cfg.Window < 0 || cfg.Max < 0 {
		return nil, fmt.Errorf("budget: job window %v and max jobs %d must not be negative", cfg.Window, cfg.Max)
	}
	for name, w := range cfg.Weights {
		if !(w > 0) || w > 1e6 {
			return nil, fmt.Errorf("budget: job %q: weight %v is not in (0, 1e6]", name, w)
		}
	}
	cfg.Weights = maps.Clone(cfg.Weights)
	return &Jobs{cfg: cfg, jobs: map[string]*jobState{}}, nil
}

// Weight is job's weight.
func (js *Jobs) Weight(job string) float64 {
	if w, ok := js.cfg.Weights[job]; ok {
		return w
	}
	return 1
}

// Open counts a Fetch stream of job from now until the returned function
// closes it; ErrTooManyJobs when job is new and Max jobs are active.
func (js *Jobs) Open(job string, now time.Time) (func(now time.Time), error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	st, err := js.enterLocked(job, now)
	if err != nil {
		return nil, err
	}
	st.streams++
	st.left = false
	return func(now time.Time) {
		js.mu.Lock()
		defer js.mu.Unlock()
		st.streams--
		st.last = now
		if st.left && st.streams == 0 && js.jobs[job] == st {
			delete(js.jobs, job)
		}
	}, nil
}

// Leave is job saying it is done with the agent (a compute agent closing):
// it leaves the shares at once when it has no stream open, else when its
// last stream closes, instead of a Window after its last request. A later
// Open or Seen of the same name makes it active again. NB: a job of
// several ranks leaves with its first rank to close while the others
// have no stream open; their next request brings it back.
func (js *Jobs) Leave(job string) {
	js.mu.Lock()
	defer js.mu.Unlock()
	st := js.jobs[job]
	switch {
	case st == nil:
	case st.streams == 0:
		delete(js.jobs, job)
	default:
		st.left = true
	}
}

// Seen marks job active now (a request, an Info); a new job is not
// recorded while Max jobs are active.
func (js *Jobs) Seen(job string, now time.Time) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if st, err := js.enterLocked(job, now); err == nil {
		st.last, st.left = now, false
	}
}

// enterLocked is job's state, made when new and there is room.
func (js *Jobs) enterLocked(job string, now time.Time) (*jobState, error) {
	if st := js.jobs[job]; st != nil {
		return st, nil
	}
	js.pruneLocked(now)
	if len(js.jobs) >= js.cfg.Max {
		return nil, fmt.Errorf("%w: %d active, the limit is %d", ErrTooManyJobs, len(js.jobs), js.cfg.Max)
	}
	st := &jobState{last: now}
	js.jobs[job] = st
	return st, nil
}

// pruneLocked forgets the jobs no longer active at now.
func (js *Jobs) pruneLocked(now time.Time) {
	for name, st := range js.jobs {
		if !js.activeLocked(st, now) {
			delete(js.jobs, name)
		}
	}
}

func (js *Jobs) activeLocked(st *jobState, now time.Time) bool {
	return st.streams > 0 || now.Sub(st.last) <= js.cfg.Window
}

// Share is job's share of the budget at now, job counted as active.
func (js *Jobs) Share(job string, now time.Time) Share {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.pruneLocked(now)
	sh := Share{Weight: js.Weight(job), Jobs: len(js.jobs)}
	sh.Total = sh.Weight
	for name := range js.jobs {
		if name != job {
			sh.Total += js.Weight(name)
		}
	}
	if js.jobs[job] == nil {
		sh.Jobs++
	}
	sh.CPUs = ShareOf(js.cfg.CPUs, sh.Weight, sh.Total)
	if js.cfg.Off {
		sh.CPUs = js.cfg.CPUs
	}
	return sh
}

// Active is the names of the active jobs at now, sorted.
func (js *Jobs) Active(now time.Time) []string {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.pruneLocked(now)
	return slices.Sorted(maps.Keys(js.jobs))
}
