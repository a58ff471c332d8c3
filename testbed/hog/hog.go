// Package hog runs the CPU hog that contends for a storage node's CPU
// beside a testbed run (testbed run --contend-at): `testbed hog --gate`
// started on the node and moved into its cgroup while it waits at its gate
// (blocked on its stdin, burning nothing), the gate opened once the compute
// agent's report shows the epochs it waits for, and, once it is stopped,
// the CPU and wall time it spun for (Usage).
//
// The hog then spins under the agent's quota, taking part of it, until the
// run ends; its rusage gives the cores it took.
package hog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/bed"
)

// Poll is how often a contended run reads the compute agent's report to
// see whether its hog should start.
const Poll = 100 * time.Millisecond

// ErrNoStorageGroup: contention needs the storage agent's cgroup.
var ErrNoStorageGroup = errors.New("hog: no storage cgroup to contend in")

// Hog is a `testbed hog --gate` in the storage agent's cgroup.
type Hog struct {
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
	// time from opened to its exit, set by Stop: the CPU and the wall
	// cover the same span (a hog descheduled on a loaded machine can spin
	// on a while after the SIGTERM).
	idle, cpu, wall time.Duration
}

// Usage is what a stopped hog did.
type Usage struct {
	// Threads is its busy threads.
	Threads int
	// Opened is when its gate opened; zero when it never did.
	Opened time.Time
	// After is the epochs the compute agent had reported when the gate
	// opened, LastEnd the end of the last of them (Unix ns; 0 for none).
	After   int
	LastEnd int64
	// CPU is its user and system time after its gate opened, Wall the
	// time from then to its exit.
	CPU, Wall time.Duration
}

// Start starts a gated hog of threads busy threads (the testbed binary
// bin's `hog` subcommand, logging to logPath) on the (first and only)
// storage node of b and moves it into its cgroup; it burns nothing until
// Open. The bed's Close stops it, if nothing did sooner.
func Start(ctx context.Context, b *bed.Bed, bin string, threads int, logPath string) (*Hog, error) {
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
	h := &Hog{cmd: cmd, gate: gate, log: f, threads: threads, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // a hog stopped by SIGTERM exits 0; Stop's SIGKILL is the only failure
		close(h.done)
	}()
	b.AtClose(func() error {
		h.Stop()
		return nil
	})
	// NB: before the gate opens, so it never spins outside the cgroup.
	if err := b.Place(bed.StorageHost(0), cmd.Process.Pid); err != nil {
		h.Stop()
		return nil, fmt.Errorf("testbed hog into the storage cgroup: %w", err)
	}
	return h, nil
}

// Open opens the gate: the hog starts spinning. after is the epochs done,
// lastEnd the end of the last of them (Unix ns; 0 for none).
func (h *Hog) Open(after int, lastEnd int64) error {
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

// Contend runs beside a policy run until ctx ends (the compute agent
// exited): it opens the gate once the report at reportPath shows after
// epochs, reading it every Poll, and stops the hog at the end, so the hog
// contends for the run's epochs only. log is given Open's error, or nil.
func (h *Hog) Contend(ctx context.Context, reportPath string, after int, log func(error)) {
	defer h.Stop()
	tick := time.NewTicker(Poll)
	defer tick.Stop()
	for {
		if after == 0 {
			log(h.Open(0, 0))
			break
		}
		if rs, _ := report.ReadReport(reportPath); len(rs) >= after {
			log(h.Open(after, rs[after-1].EndUnixNS))
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

// Stop ends the hog (SIGTERM, then SIGKILL to its group after 5 s),
// records its CPU and wall time, and returns what it did. Safe twice, and
// concurrently.
func (h *Hog) Stop() Usage {
	h.once.Do(func() {
		bed.Terminate(h.cmd, h.done)
		h.mu.Lock()
		if !h.opened.IsZero() {
			h.wall = time.Since(h.opened)
		}
		h.mu.Unlock()
		if ps := h.cmd.ProcessState; ps != nil {
			if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
				h.mu.Lock()
				h.cpu = max(0, time.Duration(ru.Utime.Nano()+ru.Stime.Nano())-h.idle)
				h.mu.Unlock()
			}
		}
		h.log.Close()
	})
	return h.usage()
}

// usage is what the hog did so far: CPU and Wall are set once it stopped.
func (h *Hog) usage() Usage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Usage{Threads: h.threads, Opened: h.opened, After: h.after, LastEnd: h.lastEnd, CPU: h.cpu, Wall: h.wall}
}
