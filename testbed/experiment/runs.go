package experiment

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/computeagent"
	"github.com/sophon-dl/sophon/testbed/peer"
	"github.com/sophon-dl/sophon/testbed/results"
)

// series is a link counter (bytes and packets) sampled over time.
type series struct {
	mu sync.Mutex
	t  []int64 // Unix ns
	v  []counts
}

// counts are the bytes and packets the compute side received.
type counts struct{ bytes, packets int64 }

func (s *series) add(t time.Time, c counts) {
	s.mu.Lock()
	s.t = append(s.t, t.UnixNano())
	s.v = append(s.v, c)
	s.mu.Unlock()
}

// at is the counters at Unix time ns, linearly interpolated between
// samples and clamped to the first and last.
func (s *series) at(ns int64) (bytes, packets float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.t) == 0 {
		return 0, 0
	}
	i := sort.Search(len(s.t), func(i int) bool { return s.t[i] >= ns })
	switch {
	case i == 0:
		return float64(s.v[0].bytes), float64(s.v[0].packets)
	case i == len(s.t):
		v := s.v[len(s.v)-1]
		return float64(v.bytes), float64(v.packets)
	}
	f := float64(ns-s.t[i-1]) / float64(s.t[i]-s.t[i-1])
	a, b := s.v[i-1], s.v[i]
	return float64(a.bytes) + f*float64(b.bytes-a.bytes), float64(a.packets) + f*float64(b.packets-a.packets)
}

// during is the counters' increase over [from, to] (Unix ns).
func (s *series) during(from, to int64) counts {
	b0, p0 := s.at(from)
	b1, p1 := s.at(to)
	return counts{int64(b1 - b0 + 0.5), int64(p1 - p0 + 0.5)}
}

// rate is the bytes per second over the last d.
func (s *series) rate(d time.Duration) float64 {
	now := time.Now().UnixNano()
	b1, _ := s.at(now)
	b0, _ := s.at(now - d.Nanoseconds())
	return (b1 - b0) / d.Seconds()
}

// sampleEvery is how often the link counter is read while a run goes on:
// the epochs' bytes are interpolated between samples, so this bounds their
// error to a few milliseconds of traffic at each end.
const sampleEvery = 5 * time.Millisecond

// watch samples n.received into s until ctx ends, and prints a progress
// line every x.cfg.ProgressEvery from line.
func (x *experiment) watch(ctx context.Context, n *node, s *series, line func(linkMBps float64) string) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	last := time.Now()
	for {
		if c, err := n.received(); err == nil {
			s.add(time.Now(), c)
		}
		if x.cfg.Progress != nil && time.Since(last) >= x.cfg.ProgressEvery {
			last = time.Now()
			fmt.Fprintln(x.cfg.Progress, line(s.rate(x.cfg.ProgressEvery)/1e6))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// noWorkConserving is the compute agent's flag for the runs that do
// without work-conserving storage (Config.WorkConserving).
const noWorkConserving = "--work-conserving=false"

// policyRun is one compute-agent run of a cell: its name in the results
// (the policy, or "<policy>-nowc"), its policy and whether it runs with
// --work-conserving=false.
type policyRun struct {
	name, policy string
	noWC         bool
}

// policyRuns is a cell's compute-agent runs, in order, under the
// work-conserving setting: each policy once ("on": the agent's default,
// no flag; "off": each with --work-conserving=false), or ("both") each
// once with the default and, but nooff, which offloads nothing, once more
// without.
func policyRuns(policies []string, wc string) []policyRun {
	var out []policyRun
	for _, p := range policies {
		out = append(out, policyRun{name: p, policy: p, noWC: wc == WorkConservingOff})
		if wc == WorkConservingBoth && p != "nooff" {
			out = append(out, policyRun{name: p + "-nowc", policy: p, noWC: true})
		}
	}
	return out
}

// policyArgs is the compute agent's command line for run pr against the
// storage agent at addr, writing its report and samples there.
func (x *experiment) policyArgs(addr string, pr policyRun, report, samples string) []string {
	args := []string{"--storage", addr, "--policy", pr.policy, "--epochs", strconv.Itoa(x.cfg.Epochs),
		"--pipeline", x.cfg.Pipeline, "--profile", x.cellProfile, "--force-profile", "--gpu", gpuFlag(x.cfg.GPURate),
		"--seed", strconv.FormatUint(x.cfg.Seed, 10), "--report", report, "--samples-out", samples,
		"--log-level", "warn", "--log-format", "json"}
	if x.cfg.Batch > 0 {
		args = append(args, "--batch", strconv.Itoa(x.cfg.Batch))
	}
	if pr.noWC {
		// NB: with "on" no flag at all: the agent's default, and agents
		// that predate the flag still run.
		args = append(args, noWorkConserving)
	}
	args = append(args, x.computeTLS...)
	return append(args, x.cfg.ComputeFlags...)
}

// runPolicy runs the compute agent with one policy for the configured
// epochs and turns its report into a results.Run; with Config.ContendAt a
// CPU hog joins the storage agent's cgroup partway (contend.go).
func (x *experiment) runPolicy(ctx context.Context, n *node, dir, addr string, cpus float64, pr policyRun) results.Run {
	policy := pr.name
	run := results.Run{Policy: policy, WorkConservingOff: pr.noWC}
	report := filepath.Join(dir, policy+".jsonl")
	samples := filepath.Join(dir, policy+".samples")
	logPath := filepath.Join(dir, policy+".log")
	for _, p := range []string{report, samples} {
		os.Remove(p)
	}
	args := x.policyArgs(addr, pr, report, samples)
	var h *hog
	if x.cfg.ContendAt > 0 {
		var err error
		if h, err = n.startHog(ctx, x.bins.testbed, x.cfg.ContendThreads, filepath.Join(dir, policy+"-hog.log")); err != nil {
			run.Error = fmt.Sprintf("contention: %v", err)
			return run
		}
	}
	label := fmt.Sprintf("[%s, %g storage cpus] %s", n.rate, cpus, policy)
	var rs []computeagent.EpochReport
	var during func(context.Context)
	if h != nil {
		during = func(ctx context.Context) {
			h.contend(ctx, report, x.contendAfter(), func(err error) {
				if err != nil {
					x.cfg.Log.Warn().Err(err).Str("policy", policy).Msg("contention")
				}
			})
		}
	}
	err := x.runProcess(ctx, n, proc{logPath: logPath, name: x.bins.compute, args: args, during: during, progress: func(mbps float64) string {
		got, _ := computeagent.ReadReport(report)
		msg := fmt.Sprintf("%s: epoch %d/%d, link %.2f MB/s", label, len(got)+1, x.cfg.Epochs, mbps)
		if k := len(got); k > 0 {
			e := got[k-1]
			msg += fmt.Sprintf(", epoch %d: %.2f s, %.1f samples/s", e.Epoch, e.Seconds, float64(e.Samples)/max(e.Seconds, 1e-9))
		}
		return msg
	}, collect: func(s *series) error {
		var err error
		rs, err = computeagent.ReadReport(report)
		if err != nil {
			return err
		}
		x.agentEpochs(n, s, &run, rs)
		return nil
	}})
	if err != nil {
		run.Error = err.Error()
	}
	if h != nil {
		x.contended(&run, pr.policy, h, rs, cpus)
	}
	if len(rs) > 0 && x.res.Dataset.Samples == 0 {
		x.res.Dataset.Samples = rs[0].Shard // tar shards: the agent counts
	}
	x.checkSamples(&run, rs, samples, true)
	if len(run.Epochs) < x.cfg.Epochs && run.Error == "" {
		run.Error = fmt.Sprintf("%d of %d epochs reported", len(run.Epochs), x.cfg.Epochs)
	}
	if e := run.Steady(); e != nil {
		x.cfg.Log.Info().Stringer("rate", n.rate).Float64("storage_cpus", cpus).Str("policy", policy).Float64("seconds", e.Seconds).
			Float64("predicted_seconds", e.PredictedSeconds).Bool("exactly_once", run.ExactlyOnce).Msg("run done")
	}
	return run
}

// agentEpochs appends the compute agent's report lines to run's epochs,
// with the link's bytes over each.
func (x *experiment) agentEpochs(n *node, s *series, run *results.Run, rs []computeagent.EpochReport) {
	for _, r := range rs {
		e := results.Epoch{
			Epoch: int(r.Epoch), Seconds: r.Seconds, PredictedSeconds: r.PredictedSeconds, BoundSeconds: r.BoundSeconds,
			Samples: r.Samples, Duplicates: r.Duplicates, Failed: r.SamplesFailed, AgentBytes: r.BytesReceived,
			StorageCPUSeconds: r.StorageCPUSeconds, ComputeCPUSeconds: r.ComputeCPUSeconds, GPUIdleFraction: r.GPUIdleFraction,
			Profiled: r.Profiled, Replanned: r.Replanned,
		}
		x.linkBytes(n, s, &e, r.StartUnixNS, r.EndUnixNS)
		run.Epochs = append(run.Epochs, e)
	}
}

// linkBytes fills e's kernel or proxy bytes over [start, end].
func (x *experiment) linkBytes(n *node, s *series, e *results.Epoch, start, end int64) {
	if start <= 0 || end <= start {
		return
	}
	c := s.during(start, end)
	if n.kernel {
		e.KernelBytes, e.KernelPackets = c.bytes, c.packets
		e.KernelPayloadBytes = max(0, c.bytes-c.packets*results.FrameOverhead)
	} else {
		e.ProxyBytes = c.bytes
	}
}

// proc is a client program runProcess runs on the compute side.
type proc struct {
	// logPath gets the program's stderr, and its stdout unless stdoutPath
	// is set.
	logPath, stdoutPath string
	// env is added to the program's environment.
	env []string
	// progress makes the progress line from the link's MB/s; collect reads
	// the program's results once it ended, with the link's series.
	progress func(linkMBps float64) string
	collect  func(*series) error
	// during, when set, runs beside the program from its start until its
	// end cancels ctx.
	during func(ctx context.Context)
	name   string
	args   []string
}

// runProcess runs a client program on the compute side to its end while
// watching the link, then calls p.collect with the link's series.
func (x *experiment) runProcess(ctx context.Context, n *node, p proc) error {
	f, err := os.Create(p.logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := n.command(ctx, false, p.name, p.args...)
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
	s := &series{}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if err := cmd.Start(); err != nil {
		stop()
		return err
	}
	if err := n.place(false, cmd.Process.Pid); err != nil {
		x.cfg.Log.Warn().Err(err).Msg("compute side not pinned")
	}
	wg.Go(func() {
		x.watch(wctx, n, s, p.progress)
	})
	if p.during != nil {
		wg.Go(func() { p.during(wctx) })
	}
	runErr := cmd.Wait()
	time.Sleep(2 * sampleEvery) // one more sample past the end
	stop()
	wg.Wait()
	if runErr != nil {
		runErr = fmt.Errorf("%s: %w (log: %s)%s", filepath.Base(p.name), runErr, p.logPath, tail(p.logPath))
	}
	return errors.Join(runErr, p.collect(s))
}

// tail is the last line of a log, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 0 || lines[len(lines)-1] == "" {
		return ""
	}
	return ": " + lines[len(lines)-1]
}

// checkSamples sets run.ExactlyOnce and run.ContentMatches from the agent's
// --samples-out file: every epoch must hold each of the dataset's samples
// once, and, with compare, each (epoch, sample)'s tensor hash must equal
// the reference run's. The first exactly-once run compared becomes the
// reference. (The trainer row's hashes are of its uint8 slot rows, not of
// float32 tensors: it is not compared.)
func (x *experiment) checkSamples(run *results.Run, rs []computeagent.EpochReport, path string, compare bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	got := map[[2]uint64]string{}
	perEpoch := map[uint64]int{}
	dups := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue
		}
		ep, err1 := strconv.ParseUint(fields[0], 10, 64)
		id, err2 := strconv.ParseUint(fields[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		k := [2]uint64{ep, id}
		if _, ok := got[k]; ok {
			dups++
			continue
		}
		got[k] = fields[2]
		perEpoch[ep]++
	}
	want := x.res.Dataset.Samples
	once := len(rs) == x.cfg.Epochs && dups == 0 && want > 0
	for _, r := range rs {
		once = once && r.Samples == want && r.Duplicates == 0 && r.SamplesFailed == 0 && perEpoch[r.Epoch] == want
	}
	// Every id in range: the count per epoch and no duplicates then mean
	// each sample exactly once.
	for k := range got {
		once = once && k[1] < uint64(want)
	}
	run.ExactlyOnce = once
	if !once || !compare {
		return
	}
	if len(x.ref) == 0 {
		x.ref = got
		run.ContentMatches = true
		return
	}
	match := len(got) == len(x.ref)
	for k, sha := range got {
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
func (x *experiment) runPeer(ctx context.Context, n *node, dir string, cpus float64) results.Run {
	run := results.Run{Policy: results.PeerPolicy}
	if err := peer.Available(x.cfg.Python); err != nil {
		run.Skipped = err.Error()
		return run
	}
	if x.bins.testbed == "" {
		run.Skipped = "the testbed binary (for the peer's file server) was not found next to the agents"
		return run
	}
	listen := net.JoinHostPort(n.listenHost, peerPort)
	if n.mode == results.ModeLoopback {
		var err error
		if listen, err = freeAddr(); err != nil {
			run.Error = err.Error()
			return run
		}
	}
	if _, err := n.startServer(ctx, true, filepath.Join(dir, "fileserve.log"), listen, x.bins.testbed,
		"serve", "--data", x.cfg.Data, "--listen", listen); err != nil {
		run.Error = fmt.Sprintf("file server: %v", err)
		return run
	}
	addr := listen
	if n.front != nil {
		var err error
		if addr, err = n.front(listen); err != nil {
			run.Error = err.Error()
			return run
		}
	}
	report := filepath.Join(dir, "peer.jsonl")
	os.Remove(report)
	opts := peer.Options{Python: x.cfg.Python, URL: "http://" + addr, Preset: x.cfg.Pipeline, Report: report,
		Epochs: x.cfg.Epochs, Batch: x.cfg.Batch, Workers: runtime.NumCPU(), GPURate: x.cfg.GPURate, Seed: x.cfg.Seed}
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
	label := fmt.Sprintf("[%s, %g storage cpus] %s", n.rate, cpus, run.Policy)
	err = x.runProcess(ctx, n, proc{logPath: filepath.Join(dir, "peer.log"), name: args[0], args: args[1:], progress: func(mbps float64) string {
		got, _ := peer.ReadReport(report)
		return fmt.Sprintf("%s: epoch %d/%d, link %.2f MB/s", label, len(got)+1, x.cfg.Epochs, mbps)
	}, collect: func(s *series) error {
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
			x.linkBytes(n, s, &e, p.StartUnixNS, p.EndUnixNS)
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
