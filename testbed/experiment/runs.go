package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/bed"
	"github.com/sophon-dl/sophon/testbed/epochs"
	"github.com/sophon-dl/sophon/testbed/hog"
	"github.com/sophon-dl/sophon/testbed/peer"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/tensors"
)

// noWorkConserving is the compute agent's flag for the runs that do
// without work-conserving storage (Config.WorkConserving).
const noWorkConserving = "--work-conserving=false"

// placementFlag is the compute agent's flag for Config.Placements.
const placementFlag = "--placement"

// policyRun is one compute-agent run of a cell: its name in the results
// (the policy, "<policy>-nowc", "<policy>-<placement>"...), its policy,
// whether it runs with --work-conserving=false and the --placement it
// passes ("" for none).
type policyRun struct {
	name, policy string
	noWC         bool
	placement    string
	// noResplit: the compute agent runs with --resplit=false
	// ("<policy>-noresplit" in Config.Policies).
	noResplit bool
	// est: the run has no saved profile (a fresh one, freshProfile, and no
	// --force-profile), so the compute agent plans its first epoch from
	// the catalog's header estimates ("<policy>-est" in Config.Policies).
	est bool
	// whole: every job plans for the storage agents' whole budgets
	// (compute-agent --whole-budget; Config.JobsWholeBudget).
	whole bool
}

// EstSuffix after a policy's name in Config.Policies (or TrainPolicy)
// runs it without a saved profile: the compute agent plans from header
// estimates, refined by what its epochs measure, as a first run does.
const EstSuffix = "-est"

// splitEst is a Config.Policies entry's policy and whether it has
// EstSuffix.
func splitEst(p string) (string, bool) {
	base, ok := strings.CutSuffix(p, EstSuffix)
	return base, ok
}

// freshProfile is the --profile of a run without a saved profile, beside
// its report (removed before the run): the agent finds none there.
func freshProfile(report string) string {
	return strings.TrimSuffix(report, filepath.Ext(report)) + ".fresh-profile.zst"
}

// policyRuns is a cell's compute-agent runs, in order, under the
// work-conserving setting: each policy once ("on": the agent's default,
// no flag; "off": each with --work-conserving=false), or ("both") each
// once with the default and, but nooff, which offloads nothing, once more
// without. With placements each of those runs once per placement, named
// with "-<placement>" after it but for PlacementPull, the agent's default.
func policyRuns(policies []string, wc string, placements []string) []policyRun {
	var out []policyRun
	for _, p := range policies {
		trimmed, noRe := strings.CutSuffix(p, NoResplitSuffix)
		base, est := splitEst(trimmed)
		variants := []policyRun{{name: p, policy: base, noWC: wc == WorkConservingOff, est: est, noResplit: noRe}}
		if wc == WorkConservingBoth && p != "nooff" {
			variants = append(variants, policyRun{name: p + "-nowc", policy: base, noWC: true, est: est, noResplit: noRe})
		}
		for _, v := range variants {
			if len(placements) == 0 {
				out = append(out, v)
				continue
			}
			for _, pl := range placements {
				r := v
				r.placement = pl
				if pl != PlacementPull {
					r.name += "-" + pl
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// policyArgs is compute agent rank's command line for run pr against the
// storage agents at addrs, writing its report and samples there. With
// several compute agents it runs as --rank rank --world M with its own
// profile.
func (x *experiment) policyArgs(addrs []string, pr policyRun, rank int, report, samples string) []string {
	args := []string{"--storage", strings.Join(addrs, ","), "--policy", pr.policy, "--epochs", strconv.Itoa(x.cfg.Epochs),
		"--pipeline", x.pipe, "--gpu", gpuFlag(x.cfg.GPURate),
		"--seed", strconv.FormatUint(x.cfg.Seed, 10), "--report", report, "--samples-out", samples,
		"--log-level", "warn", "--log-format", "json"}
	if pr.est {
		args = append(args, "--profile", freshProfile(report))
	} else {
		args = append(args, "--profile", x.rankPath(x.cellProfile, rank), "--force-profile")
	}
	switch {
	case x.cfg.Jobs > 1:
		args = append(args, "--job", jobName(rank))
	case x.cfg.ComputeNodes > 1:
		args = append(args, "--rank", strconv.Itoa(rank), "--world", strconv.Itoa(x.cfg.ComputeNodes))
	}
	if x.cfg.Batch > 0 {
		args = append(args, "--batch", strconv.Itoa(x.cfg.Batch))
	}
	if pr.noWC {
		// NB: with "on" no flag at all: the agent's default, and agents
		// that predate the flag still run.
		args = append(args, noWorkConserving)
	}
	if pr.whole {
		args = append(args, wholeBudgetFlag)
	}
	if pr.noResplit {
		args = append(args, noResplit)
	}
	if pr.placement != "" {
		// NB: likewise none without Config.Placements.
		args = append(args, placementFlag, pr.placement)
	}
	args = append(args, x.cacheArgs(pr, report)...)
	args = append(args, x.computeTLS[rank]...)
	return append(args, x.cfg.ComputeFlags...)
}

// rankFiles are one compute agent's files in a policy run: its report,
// sample log and log ("<run>.jsonl"..., or "<run>-rank<i>.jsonl"... with
// several compute agents).
type rankFiles struct{ report, samples, log string }

func (x *experiment) rankFiles(dir, name string, rank int) rankFiles {
	base := filepath.Join(dir, name)
	return rankFiles{x.rankPath(base+".jsonl", rank), x.rankPath(base+".samples", rank), x.rankPath(base+".log", rank)}
}

// readReports reads every rank's report: the complete lines so far.
func readReports(files []rankFiles) ([][]report.EpochReport, error) {
	out := make([][]report.EpochReport, len(files))
	var errs []error
	for i, f := range files {
		var err error
		if out[i], err = report.ReadReport(f.report); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// runPolicy runs a compute agent per compute node with one policy for
// the configured epochs and turns their reports into a results.Run; with
// Config.ContendAt a CPU hog joins the storage agent's cgroup partway
// (package hog, scored in contend.go).
func (x *experiment) runPolicy(ctx context.Context, b *bed.Bed, dir string, addrs []string, cpus float64, pr policyRun) results.Run {
	policy := pr.name
	run := results.Run{Policy: policy, WorkConservingOff: pr.noWC, Placement: pr.placement, WholeBudget: pr.whole, NoResplit: pr.noResplit}
	var files []rankFiles
	var procs []proc
	for rank := range b.ComputeNodes() {
		f := x.rankFiles(dir, policy, rank)
		for _, p := range []string{f.report, f.samples, freshProfile(f.report)} {
			os.Remove(p)
		}
		files = append(files, f)
		procs = append(procs, proc{logPath: f.log, name: x.bins.compute, args: x.policyArgs(addrs, pr, rank, f.report, f.samples)})
	}
	var h *hog.Hog
	if x.cfg.ContendAt > 0 {
		var err error
		if h, err = hog.Start(ctx, b, x.bins.testbed, x.cfg.ContendThreads, filepath.Join(dir, policy+"-hog.log")); err != nil {
			run.Error = fmt.Sprintf("contention: %v", err)
			return run
		}
	}
	label := fmt.Sprintf("[%s, %g storage cpus] %s", b.Label(), cpus, policy)
	if len(x.cfg.Pipelines) > 1 {
		label += " [" + x.pipe + "]"
	}
	var ranks [][]report.EpochReport
	var besides []func(context.Context)
	if h != nil {
		besides = append(besides, func(ctx context.Context) {
			h.Contend(ctx, files[0].report, x.contendAfter(), func(err error) {
				if err != nil {
					x.cfg.Log.Warn().Err(err).Str("policy", policy).Msg("contention")
				}
			})
		})
	}
	var changes []change
	if topo := b.Topology(); len(x.cfg.RateSchedule) > 0 && topo != nil && len(topo.Shaped) > 0 {
		base := topo.Shaped[0].Rate
		besides = append(besides, func(ctx context.Context) {
			changes = followSchedule(ctx, topo, x.cfg.RateSchedule, base, files[0].report, func(err error) {
				x.cfg.Log.Warn().Err(err).Str("policy", policy).Msg("rate schedule")
			})
		})
	}
	err := x.runProcess(ctx, b, client{procs: procs, during: beside(besides), progress: x.progress(label, files), collect: func(s *bed.Series) error {
		var err error
		if ranks, err = readReports(files); err != nil {
			return err
		}
		return x.agentEpochs(b.Netns(), s, &run, ranks)
	}})
	if err != nil {
		run.Error = err.Error()
	}
	if ranks == nil {
		ranks = make([][]report.EpochReport, len(files))
	}
	if h != nil {
		x.contended(&run, pr.policy, h, ranks[0], cpus)
	}
	run.RateChanges = rateChanges(changes, ranks[0])
	if len(ranks[0]) > 0 && x.res.Dataset.Samples == 0 {
		for k, rs := range ranks {
			if len(rs) > 0 && (x.cfg.Jobs <= 1 || k == 0) { // each job's shard is the dataset
				x.res.Dataset.Samples += rs[0].Shard // tar shards: the agents count
			}
		}
	}
	var samples []string
	for _, f := range files {
		samples = append(samples, f.samples)
	}
	if x.cfg.Jobs > 1 {
		x.checkJobs(&run, ranks, samples)
	} else {
		x.checkSamples(&run, ranks, samples, true)
	}
	if len(run.Epochs) < x.cfg.Epochs && run.Error == "" {
		run.Error = fmt.Sprintf("%d of %d epochs reported", len(run.Epochs), x.cfg.Epochs)
	}
	if e := run.Steady(); e != nil {
		x.cfg.Log.Info().Str("rate", b.Label()).Float64("storage_cpus", cpus).Str("policy", policy).Float64("seconds", e.Seconds).
			Float64("predicted_seconds", e.PredictedSeconds).Bool("exactly_once", run.ExactlyOnce).Msg("run done")
	}
	return run
}

// progress is a policy run's progress line (label, the ranks' report
// files) at the link's mbps: the epoch the slowest rank is in, and rank
// 0's last epoch.
func (x *experiment) progress(label string, files []rankFiles) func(mbps float64) string {
	return func(mbps float64) string {
		got, _ := readReports(files)
		done := len(got[0])
		for _, rs := range got {
			done = min(done, len(rs))
		}
		msg := fmt.Sprintf("%s: epoch %d/%d, link %.2f MB/s", label, done+1, x.cfg.Epochs, mbps)
		if rs := got[0]; done > 0 {
			e := rs[done-1]
			msg += fmt.Sprintf(", epoch %d: %.2f s, %.1f samples/s", e.Epoch, e.Seconds, float64(e.Samples)/max(e.Seconds, 1e-9))
			if len(got) > 1 {
				msg += " (rank 0)"
			}
		}
		return msg
	}
}

// agentEpochs appends the compute agents' epochs (epochs.Agents: one per
// line every rank reported; ranks[i] is rank i's lines) to run's, with the
// link's bytes over each. kernel: s holds the kernel's counters (netns
// mode), not the shaping proxies'.
func (x *experiment) agentEpochs(kernel bool, s *bed.Series, run *results.Run, ranks [][]report.EpochReport) error {
	eps, err := epochs.Agents(ranks, x.cfg.Jobs > 1, x.link(kernel, s))
	run.Epochs = append(run.Epochs, eps...)
	return err
}

// link is where the epochs' link figures come from: s, the kernel's
// counters (kernel) or the shaping proxies'.
func (x *experiment) link(kernel bool, s *bed.Series) epochs.Link {
	return epochs.Link{Series: s, Kernel: kernel, DelayLine: x.cfg.wan() != nil}
}

// beside runs fs side by side until ctx ends, each to its end; nil for
// none.
func beside(fs []func(context.Context)) func(context.Context) {
	if len(fs) == 0 {
		return nil
	}
	return func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, f := range fs {
			wg.Go(func() { f(ctx) })
		}
		wg.Wait()
	}
}

// proc is a client program run on a compute node.
type proc struct {
	// logPath gets the program's stderr, and its stdout unless stdoutPath
	// is set.
	logPath, stdoutPath string
	// env is added to the program's environment.
	env  []string
	name string
	args []string
}

// client is what runProcess runs: procs[i] on compute node i, all at
// once.
type client struct {
	procs []proc
	// progress makes the progress line from the link's MB/s; collect reads
	// the programs' results once they all ended, with the link's series.
	progress func(linkMBps float64) string
	collect  func(*bed.Series) error
	// during, when set, runs beside the programs from their start until
	// their end cancels ctx.
	during func(ctx context.Context)
}

// runProcess runs a client's programs on the compute nodes to their end
// while watching the links, then calls c.collect with the links' series.
// A program's failure is reported with its rank when there are several.
func (x *experiment) runProcess(ctx context.Context, b *bed.Bed, c client) error {
	var cmds []*exec.Cmd
	for i, p := range c.procs {
		f, err := os.Create(p.logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd := b.Command(ctx, bed.ComputeHost(i), p.name, p.args...)
		cmd.Stdout, cmd.Stderr = f, f
		if p.stdoutPath != "" {
			out, err := os.Create(p.stdoutPath)
			if err != nil {
				return err
			}
			defer out.Close()
			cmd.Stdout = out
		}
		if len(p.env) > 0 {
			cmd.Env = append(os.Environ(), p.env...)
		}
		cmds = append(cmds, cmd)
	}
	s := &bed.Series{}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var started []*exec.Cmd
	var startErr error
	for i, cmd := range cmds {
		if startErr = cmd.Start(); startErr != nil {
			break
		}
		started = append(started, cmd)
		if err := b.Place(bed.ComputeHost(i), cmd.Process.Pid); err != nil {
			x.cfg.Log.Warn().Err(err).Msg("compute side not pinned")
		}
	}
	if startErr != nil {
		stop() // ends the started ones' contexts: they are killed
		for _, cmd := range started {
			cmd.Wait()
		}
		return startErr
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		x.watch(wctx, b, s, c.progress)
	})
	if c.during != nil {
		wg.Go(func() { c.during(wctx) })
	}
	errs := make([]error, len(cmds))
	var waits sync.WaitGroup
	for i, cmd := range cmds {
		waits.Go(func() { errs[i] = cmd.Wait() })
	}
	waits.Wait()
	time.Sleep(2 * sampleEvery) // one more sample past the end
	stop()
	wg.Wait()
	var runErrs []error
	for i, err := range errs {
		if err == nil {
			continue
		}
		p := c.procs[i]
		err = fmt.Errorf("%s: %w (log: %s)%s", filepath.Base(p.name), err, p.logPath, bed.Tail(p.logPath))
		if len(cmds) > 1 {
			err = fmt.Errorf("rank %d: %w", i, err)
		}
		runErrs = append(runErrs, err)
	}
	return errors.Join(append(runErrs, c.collect(s))...)
}

// sampleEvery is how often the link counter is read while a run goes on:
// the epochs' bytes are interpolated between samples, so this bounds their
// error to a few milliseconds of traffic at each end.
const sampleEvery = 5 * time.Millisecond

// watch samples b.Counters into s until ctx ends, and prints a progress
// line every x.cfg.ProgressEvery from line.
func (x *experiment) watch(ctx context.Context, b *bed.Bed, s *bed.Series, line func(linkMBps float64) string) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	last := time.Now()
	for {
		// Stamped at the middle of the read, which a loaded machine can
		// stretch to tens of milliseconds of traffic.
		before := time.Now()
		if c, err := b.Counters(); err == nil {
			s.Add(before.Add(time.Since(before)/2), c)
		}
		if x.cfg.Progress != nil && time.Since(last) >= x.cfg.ProgressEvery {
			last = time.Now()
			fmt.Fprintln(x.cfg.Progress, line(s.Rate(x.cfg.ProgressEvery)/1e6))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkSamples sets run.ExactlyOnce and run.ContentMatches from the
// agents' --samples-out files (paths[i] and ranks[i] are rank i's file
// and report lines): over all ranks together, every epoch must hold each
// of the dataset's samples once, and, with compare, each (epoch,
// sample)'s tensor hash must equal the reference's (Config.Reference, or
// else the first exactly-once run compared, which becomes it). The
// trainer row's hashes are of its uint8 slot rows, not of float32
// tensors: it is not compared.
func (x *experiment) checkSamples(run *results.Run, ranks [][]report.EpochReport, paths []string, compare bool) {
	l, err := tensors.Read(paths...)
	if err != nil || len(l.Got) == 0 {
		return
	}
	want := x.res.Dataset.Samples
	once := l.Dups == 0 && want > 0
	for _, rs := range ranks {
		once = once && len(rs) == x.cfg.Epochs
	}
	for i := 0; once && i < len(ranks[0]); i++ {
		total := 0
		for _, rs := range ranks {
			r := rs[i]
			total += r.Samples
			once = once && r.Epoch == ranks[0][i].Epoch && r.Duplicates == 0 && r.SamplesFailed == 0
		}
		once = once && total == want && l.PerEpoch[ranks[0][i].Epoch] == want
	}
	// Every id in range: the count per epoch and no duplicates then mean
	// each sample exactly once.
	for k := range l.Got {
		once = once && k[1] < uint64(want)
	}
	run.ExactlyOnce = once
	if !once || !compare {
		return
	}
	if len(x.ref) == 0 {
		x.ref = l.Got
		run.ContentMatches = true
		return
	}
	match := len(l.Got) == len(x.ref)
	for k, sha := range l.Got {
		match = match && x.ref[k] == sha
	}
	run.ContentMatches = match
}

// peerLoop fills a training peer run's loop figures from its epochs, as
// train_cnn.py measures its own: images over the loop's wall time (each
// epoch from asking for its first batch to its last step's end), the time
// blocked on the DataLoader, and the run's first losses.
func (x *experiment) peerLoop(run *results.Run, eps []peer.Epoch) {
	for _, p := range eps {
		run.LoopImages += p.Samples
		run.LoopSteps += p.Batches
		run.LoopSeconds += p.Seconds
		run.LoopWaitSeconds += p.GPUIdleSeconds
		for _, l := range p.Losses {
			if len(run.FirstLosses) < results.FirstLossSteps {
				run.FirstLosses = append(run.FirstLosses, l)
			}
		}
	}
	if run.LoopSeconds > 0 {
		run.LoopImagesPerSec = float64(run.LoopImages) / run.LoopSeconds
	}
}

// runPeer runs the torchvision DataLoader against a file server on the
// storage side, through the same link.
func (x *experiment) runPeer(ctx context.Context, b *bed.Bed, dir string, cpus float64) results.Run {
	run := results.Run{Policy: results.PeerPolicy}
	if err := peer.Available(x.cfg.Python); err != nil {
		run.Skipped = err.Error()
		return run
	}
	if x.bins.testbed == "" {
		run.Skipped = "the testbed binary (for the peer's file server) was not found next to the agents"
		return run
	}
	listen, err := b.ListenAddr(0, peerPort)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	if _, err := b.StartServer(ctx, bed.StorageHost(0), filepath.Join(dir, "fileserve.log"), listen, x.bins.testbed,
		"serve", "--data", x.cfg.Data, "--listen", listen); err != nil {
		run.Error = fmt.Sprintf("file server: %v", err)
		return run
	}
	addr, err := b.Front(0, listen)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	report := filepath.Join(dir, "peer.jsonl")
	os.Remove(report)
	opts := peer.Options{Python: x.cfg.Python, URL: "http://" + addr, Preset: x.cfg.Pipeline, Report: report,
		Epochs: x.cfg.Epochs, Batch: x.cfg.Batch, Workers: peerWorkers(b.ComputeQuota()), GPURate: x.cfg.GPURate, Seed: x.cfg.Seed}
	if x.cfg.Train && x.trainErr == nil {
		// The same CNN as the trainer row's, in place of the simulated GPU.
		opts.TrainModel, opts.NumClasses, opts.FirstLosses = x.trainScript, x.numClasses(), results.FirstLossSteps
		run.Training = true
	}
	args, err := peer.Args(opts)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	label := fmt.Sprintf("[%s, %g storage cpus] %s", b.Label(), cpus, run.Policy)
	err = x.runProcess(ctx, b, client{procs: []proc{{logPath: filepath.Join(dir, "peer.log"), name: args[0], args: args[1:]}}, progress: func(mbps float64) string {
		got, _ := peer.ReadReport(report)
		return fmt.Sprintf("%s: epoch %d/%d, link %.2f MB/s", label, len(got)+1, x.cfg.Epochs, mbps)
	}, collect: func(s *bed.Series) error {
		eps, err := peer.ReadReport(report)
		if err != nil {
			return err
		}
		once := len(eps) == x.cfg.Epochs
		if run.Training {
			x.peerLoop(&run, eps)
		}
		for _, p := range eps {
			e := results.Epoch{Epoch: p.Epoch, Seconds: p.Seconds, Samples: p.Samples, Duplicates: p.Duplicates,
				Failed: p.Failed, AgentBytes: p.Bytes}
			if p.Seconds > 0 {
				e.GPUIdleFraction = p.GPUIdleSeconds / p.Seconds
			}
			x.link(b.Netns(), s).Fill(&e, [2]int64{p.StartUnixNS, p.EndUnixNS})
			run.Epochs = append(run.Epochs, e)
			once = once && p.Samples == x.res.Dataset.Samples && p.UniqueSamples == p.Samples && p.Duplicates == 0 && p.Failed == 0
		}
		run.ExactlyOnce = once
		return nil
	}})
	if err != nil {
		run.Error = err.Error()
	}
	return run
}

// peerWorkers is the peer's DataLoader workers: the compute quota's cores
// rounded up, as many as its cores (its processes run under that quota,
// as the compute agent does), or the machine's CPUs without a quota.
func peerWorkers(quota float64) int {
	if quota > 0 {
		return max(1, int(math.Ceil(quota)))
	}
	return runtime.NumCPU()
}
