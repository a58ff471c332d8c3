package experiment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/testbed/bed"
	"github.com/sophon-dl/sophon/testbed/cellbound"
	"github.com/sophon-dl/sophon/testbed/results"
)

// Contention (Config.ContendAt): each policy run starts `testbed hog
// --gate` in the storage namespace with the run, moves it into the
// storage agent's cgroup while it waits at its gate (blocked on its stdin,
// burning nothing), and opens the gate once the compute agent's report
// shows floor(ContendAt x Epochs) epochs, read every contendPoll. The hog
// then spins under the agent's quota, taking part of it, until the compute
// agent exits; its rusage gives the cores it took.

// contendPoll is how often a contended run reads the compute agent's
// report to see whether its hog should start.
const contendPoll = 100 * time.Millisecond

// minCoresLeft stands in for a storage share the hog took entirely: a
// zero would mean unlimited to the planner.
const minCoresLeft = 1e-3

// ErrNoStorageGroup: contention needs the storage agent's cgroup.
var ErrNoStorageGroup = errors.New("experiment: no storage cgroup to contend in")

// contendAfter is the epochs a policy run reports before its hog starts.
func (x *experiment) contendAfter() int {
	return int(math.Floor(x.cfg.ContendAt * float64(x.cfg.Epochs)))
}

// hog is a `testbed hog --gate` in the storage agent's cgroup.
type hog struct {
	cmd     *exec.Cmd
	gate    io.WriteCloser
	log     *os.File
	threads int
	done    chan struct{}
	once    sync.Once

	mu sync.Mutex
	// opened is when the gate opened (zero until then); after the epochs
	// done then, lastEnd the last one's end (Unix ns).
	opened  time.Time
	after   int
	lastEnd int64
	// idle is the hog's CPU time just before its gate opened (its
	// start-up); cpu its user and system time after that and wall the
	// time from opened to its exit, set by stop: the CPU and the wall
	// cover the same span (a hog descheduled on a loaded machine can spin
	// on a while after the SIGTERM).
	idle, cpu, wall time.Duration
}

// startHog starts a gated hog of threads busy threads on the (first and
// only) storage node of b and moves it into its cgroup; it burns nothing
// until open. The bed's Close stops it, if nothing did sooner.
func startHog(ctx context.Context, b *bed.Bed, bin string, threads int, logPath string) (*hog, error) {
	if b.StorageGroup(0) == nil {
		return nil, ErrNoStorageGroup
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := b.Command(ctx, bed.StorageHost(0), bin, "hog", "--threads", strconv.Itoa(threads), "--gate")
	cmd.Stdout, cmd.Stderr = f, f
	gate, err := cmd.StdinPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("testbed hog: %w", err)
	}
	h := &hog{cmd: cmd, gate: gate, log: f, threads: threads, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // a hog stopped by SIGTERM exits 0; stop's SIGKILL is the only failure
		close(h.done)
	}()
	b.AtClose(func() error {
		h.stop()
		return nil
	})
	// NB: before the gate opens, so it never spins outside the cgroup.
	if err := b.Place(bed.StorageHost(0), cmd.Process.Pid); err != nil {
		h.stop()
		return nil, fmt.Errorf("testbed hog into the storage cgroup: %w", err)
	}
	return h, nil
}

// open opens the gate: the hog starts spinning. after is the epochs done,
// lastEnd the end of the last of them (Unix ns; 0 for none).
func (h *hog) open(after int, lastEnd int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.opened.IsZero() {
		return nil
	}
	h.idle, h.opened = bed.ProcCPU(h.cmd.Process.Pid), time.Now()
	if _, err := io.WriteString(h.gate, "go\n"); err != nil {
		h.opened = time.Time{}
		return fmt.Errorf("opening the hog's gate: %w", err)
	}
	h.after, h.lastEnd = after, lastEnd
	return nil
}

// contend runs beside a policy run until ctx ends (the compute agent
// exited): it opens the gate once the report at reportPath shows after
// epochs, reading it every contendPoll, and stops the hog at the end, so
// the hog contends for the run's epochs only.
func (h *hog) contend(ctx context.Context, reportPath string, after int, log func(error)) {
	defer h.stop()
	tick := time.NewTicker(contendPoll)
	defer tick.Stop()
	for {
		if after == 0 {
			log(h.open(0, 0))
			break
		}
		if rs, _ := report.ReadReport(reportPath); len(rs) >= after {
			log(h.open(after, rs[after-1].EndUnixNS))
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	<-ctx.Done()
}

// stop ends the hog (SIGTERM, then SIGKILL to its group after 5 s) and
// records its CPU and wall time. Safe twice, and concurrently.
func (h *hog) stop() {
	h.once.Do(func() {
		h.mu.Lock()
		if !h.opened.IsZero() {
			h.wall = time.Since(h.opened)
		}
		h.mu.Unlock()
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
			<-h.done
		}
		if ps := h.cmd.ProcessState; ps != nil {
			if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
				h.mu.Lock()
				h.cpu = max(0, time.Duration(ru.Utime.Nano()+ru.Stime.Nano())-h.idle)
				h.mu.Unlock()
			}
		}
		h.log.Close()
	})
}

// contended stops the run's hog and records it in run.Contention, with
// the reduced-CPU prediction; nothing when the hog never started (the run
// ended or failed first). policy is the run's.
func (x *experiment) contended(run *results.Run, policy string, h *hog, rs []report.EpochReport, cpus float64) {
	h.stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.opened.IsZero() {
		x.cfg.Log.Warn().Str("policy", run.Policy).Int("epochs", len(rs)).Msg("the run ended before its hog started")
		return
	}
	k := &results.Contention{AfterEpochs: h.after, Threads: h.threads, HogCPUSeconds: h.cpu.Seconds(), HogSeconds: h.wall.Seconds()}
	if k.HogSeconds > 0 {
		k.HogCores = k.HogCPUSeconds / k.HogSeconds
	}
	k.StorageCoresLeft = cpus - k.HogCores
	switch {
	case len(rs) > h.after:
		k.FromEpoch = int(rs[h.after].Epoch)
		if st := rs[h.after].StartUnixNS; st > 0 {
			k.IntoEpochSeconds = float64(h.opened.UnixNano()-st) / 1e9
		}
	case h.after > 0 && len(rs) >= h.after:
		k.FromEpoch = int(rs[h.after-1].Epoch) + 1
	}
	if h.lastEnd > 0 {
		k.LagSeconds = float64(h.opened.UnixNano()-h.lastEnd) / 1e9
	}
	var err error
	if k.PredictedSeconds, err = x.reducedPrediction(policy, rs, k.FromEpoch, k.StorageCoresLeft); err != nil {
		k.PredictionError = err.Error()
	}
	run.Contention = k
	x.cfg.Log.Info().Str("policy", run.Policy).Int("from_epoch", k.FromEpoch).Float64("lag_seconds", k.LagSeconds).
		Float64("into_epoch_seconds", k.IntoEpochSeconds).
		Float64("hog_cores", k.HogCores).Float64("storage_cores_left", k.StorageCoresLeft).
		Float64("reduced_prediction_seconds", k.PredictedSeconds).Msg("contended")
}

// reducedPrediction is the named policy's epoch time for the experiment's
// profile and the run's stage 1 resources (its first report line) with
// storageCores storage cores, and the storage CPU per byte sent as the
// last epoch before the hog (before epoch from) measured it: what its
// re-plan predicts at that CPU.
func (x *experiment) reducedPrediction(name string, rs []report.EpochReport, from int, storageCores float64) (float64, error) {
	if len(rs) == 0 || rs[0].Stage1 == nil {
		return 0, errors.New("no stage 1 in the compute agent's report")
	}
	prof, err := profiler.Load(x.cellProfile, "", "")
	if err != nil {
		return 0, err
	}
	cores := rs[0].Stage1.ComputeCores // what its model planned with: its quota
	if cores <= 0 {
		cores = cellbound.ComputeCores(x.cfg.ComputeFlags)
	}
	res := stage1Resources(*rs[0].Stage1, storageCores, cores)
	for _, r := range rs {
		if int(r.Epoch) < from && r.StorageNSPerByte > 0 {
			res.StorageNSPerByte = r.StorageNSPerByte
		}
	}
	plan, err := policy.ByName(name, policy.OneNode(prof, res))
	if err != nil {
		return 0, err
	}
	return plan.Pred.Seconds, nil
}

// stage1Resources is the planner's policy.Resources as the compute agent
// builds them from stage 1 (computeagent's stage1), with storageCores
// storage cores instead of the storage agents' --cpus (at least
// minCoresLeft: zero would mean unlimited).
func stage1Resources(s report.Stage1Summary, storageCores, computeCores float64) policy.Resources {
	return policy.Resources{
		LinkBytesPerSec:  s.LinkBytesPerSec,
		StorageCores:     max(storageCores, minCoresLeft),
		ComputeCores:     computeCores,
		GPUSamplesPerSec: s.GPUSamplesPerSec,
		StorageSpeed:     s.StorageSpeed,
	}
}
