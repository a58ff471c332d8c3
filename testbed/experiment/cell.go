package experiment

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/testbed"
	"github.com/sophon-dl/sophon/testbed/cgroup"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// experiment is a Run in progress.
type experiment struct {
	cfg  Config
	bins binaries
	res  *results.Results
	pin  pinPlan
	// profile is the experiment's stage 2 profile, its samples only; each
	// cell's runs use cellProfile, a copy that also keeps the resources
	// the compute agents measure at that cell's rate and CPU (see
	// useCellProfile).
	profile, cellProfile string
	// ref maps (epoch, sample) to the tensor hash the reference run (the
	// first exactly-once run) delivered.
	ref map[[2]uint64]string
	// noCgroups is set once making cgroups failed: later cells do without.
	noCgroups bool
	// trainScript is train_cnn.py with Config.Train; trainErr why the
	// training rows cannot run, or nil.
	trainScript string
	trainErr    error
	// trainProfile is the trainer row's stage 2 profile (its pipeline
	// differs from the policy rows').
	trainProfile string
	// storageTLS and computeTLS are the agents' security flags for the
	// current cell: a fresh CA's certificates and gossip key, or
	// --insecure.
	storageTLS, computeTLS []string
}

var groupSeq atomic.Uint32

// node is one cell's pair of emulated nodes.
type node struct {
	mode string
	// command runs a program on the storage or the compute side.
	command func(ctx context.Context, storageSide bool, name string, args ...string) *exec.Cmd
	// dial connects from the compute side.
	dial func(ctx context.Context, addr string) (net.Conn, error)
	// storageHost is the storage side's address as the compute side sees
	// it; listenHost the address servers on the storage side bind.
	storageHost, listenHost string
	// received is the bytes the compute side has received so far: the
	// compute veth's kernel counter, or the shaping proxies' relayed bytes.
	received func() (counts, error)
	kernel   bool
	rate     shape.Rate
	// front puts a shaping proxy in front of a loopback server and returns
	// the address to dial (loopback mode); nil in netns mode.
	front func(target string) (string, error)
	// storageGroup holds the storage side's processes (nil without
	// cgroups); computeGroup the compute side's when pinned.
	storageGroup, computeGroup *cgroup.Group
	cleanup                    []func() error
}

func (n *node) close() error {
	var errs []error
	for i := len(n.cleanup) - 1; i >= 0; i-- {
		errs = append(errs, n.cleanup[i]())
	}
	return errors.Join(errs...)
}

// place moves a started process into its side's cgroup.
func (n *node) place(storageSide bool, pid int) error {
	g := n.computeGroup
	if storageSide {
		g = n.storageGroup
	}
	if g == nil {
		return nil
	}
	return g.Add(pid)
}

// newNode sets up a cell's link and CPU limits.
func (x *experiment) newNode(ctx context.Context, rate shape.Rate, cpus float64) (*node, error) {
	n := &node{mode: x.res.Mode, rate: rate}
	if n.mode == results.ModeNetns {
		pair, err := netns.Setup(ctx, netns.Config{Rate: rate})
		if err != nil {
			return nil, err
		}
		n.cleanup = append(n.cleanup, pair.Close)
		n.command = func(ctx context.Context, storageSide bool, name string, args ...string) *exec.Cmd {
			return pair.Command(ctx, storageSide, name, args...)
		}
		n.dial = func(ctx context.Context, addr string) (net.Conn, error) { return pair.Dial(ctx, false, "tcp", addr) }
		n.storageHost, n.listenHost = pair.StorageIP, pair.StorageIP
		n.kernel = true
		n.received = func() (counts, error) {
			c, err := pair.Counters()
			return counts{int64(c.Compute.RxBytes), int64(c.Compute.RxPackets)}, err
		}
		if cgroup.Available() == nil && !x.noCgroups {
			if err := x.groups(n, cpus); err != nil {
				// A cgroup hierarchy can be mounted yet refuse new groups
				// (read-only in a container): the agent's own --cpus budget
				// still limits its ops, so carry on and say so.
				x.noCgroups = true
				x.res.ModeNote += fmt.Sprintf("; cgroups could not be made (%v): the storage agent's --cpus budget alone limits it, and nothing is pinned", err)
				x.res.Machine.Pinning = "not pinned (no cgroups)"
				x.cfg.Log.Warn().Err(err).Msg("no cgroups: the storage agent's --cpus budget alone limits it")
			}
		}
		return n, nil
	}
	// Loopback: every server gets a shaping proxy; runs are sequential, so
	// one proxy carries traffic at a time and their byte counts add up.
	var proxies []*shape.Proxy
	var mu sync.Mutex
	pctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	n.cleanup = append(n.cleanup, func() error { cancel(); wg.Wait(); return nil })
	n.command = func(ctx context.Context, _ bool, name string, args ...string) *exec.Cmd {
		return netns.GroupCommand(ctx, name, args...)
	}
	n.dial = func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	n.storageHost, n.listenHost = "127.0.0.1", "127.0.0.1"
	n.received = func() (counts, error) {
		mu.Lock()
		defer mu.Unlock()
		var total int64
		for _, p := range proxies {
			total += p.Stats().Down
		}
		return counts{bytes: total}, nil
	}
	n.front = func(target string) (string, error) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		px := &shape.Proxy{Target: target, Rate: rate}
		mu.Lock()
		proxies = append(proxies, px)
		mu.Unlock()
		wg.Go(func() { _ = px.ServeListener(pctx, lis) })
		return lis.Addr().String(), nil
	}
	return n, nil
}

// server is a background process of a cell (the storage agent, the peer's
// file server, the trainer row's compute agent).
type server struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
	once sync.Once
}

// stop ends the server: SIGTERM, then SIGKILL to its group after 5 s. It
// returns the server's exit error, nil when it exited 0. Safe twice.
func (s *server) stop() error {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		s.log.Close()
	})
	return s.err
}

// startServer starts a server on one side, places it in that side's cgroup
// and waits until addr answers. The server is stopped by n.close (SIGTERM,
// then SIGKILL to its group).
func (n *node) startServer(ctx context.Context, storageSide bool, logPath, addr string, name string, args ...string) (*server, error) {
	ready := func(ctx context.Context) error {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := n.dial(dctx, addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	return n.startDaemon(ctx, storageSide, logPath, "listening on "+addr, ready, name, args...)
}

// startDaemon starts a server on one side, places it in that side's cgroup
// and waits until ready returns nil (for at most 30 s; what names what it
// waits for, for the error). The server is stopped by n.close, or sooner
// by its stop.
func (n *node) startDaemon(ctx context.Context, storageSide bool, logPath, what string, ready func(context.Context) error, name string, args ...string) (*server, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := n.command(ctx, storageSide, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	s := &server{cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	n.cleanup = append(n.cleanup, func() error {
		s.stop()
		return nil
	})
	if err := n.place(storageSide, cmd.Process.Pid); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ready(ctx)
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%s exited: %v (log: %s)%s", filepath.Base(name), s.err, logPath, tail(logPath))
		case <-ctx.Done():
			return nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s not %s after 30 s: %v (log: %s)", filepath.Base(name), what, err, logPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cell runs every policy (and the trainer and the peer) at one rate and
// storage CPU limit; rep numbers the repetition with --repeat (0: none).
func (x *experiment) cell(ctx context.Context, rate shape.Rate, cpus float64, rep int) (results.Cell, error) {
	cell := results.Cell{Rate: rate.String(), RateBitsPerSec: rate.Bits(), StorageCPUs: cpus, Repetition: rep}
	dir := filepath.Join(x.cfg.Out, cellDir(rate.String(), cpus, rep))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cell, err
	}
	n, err := x.newNode(ctx, rate, cpus)
	if err != nil {
		return cell, err
	}
	defer func() {
		if err := n.close(); err != nil {
			x.cfg.Log.Warn().Err(err).Msg("cell teardown")
		}
	}()
	if x.cfg.Insecure {
		x.storageTLS, x.computeTLS = []string{"--insecure"}, []string{"--insecure"}
	} else if x.storageTLS, x.computeTLS, err = testbed.AgentCerts(filepath.Join(dir, "certs"), n.storageHost, n.listenHost); err != nil {
		return cell, err
	}
	listen := net.JoinHostPort(n.listenHost, storagePort)
	if n.mode == results.ModeLoopback {
		listen = "127.0.0.1:0"
		if listen, err = freeAddr(); err != nil {
			return cell, err
		}
	}
	sargs := append([]string{"--data", x.cfg.Data, "--listen", listen, "--cpus", strconv.FormatFloat(cpus, 'f', -1, 64),
		"--log-level", "warn", "--log-format", "json"}, x.storageTLS...)
	sargs = append(sargs, x.cfg.StorageFlags...)
	if _, err := n.startServer(ctx, true, filepath.Join(dir, "storage-agent.log"), listen, x.bins.storage, sargs...); err != nil {
		return cell, fmt.Errorf("storage agent: %w", err)
	}
	addr := listen
	if n.front != nil {
		if addr, err = n.front(listen); err != nil {
			return cell, err
		}
	}
	if err := x.useCellProfile(rate.String(), cpus); err != nil {
		return cell, err
	}
	for _, p := range policyRuns(x.cfg.Policies, x.cfg.WorkConserving) {
		if ctx.Err() != nil {
			return cell, ctx.Err()
		}
		run := x.runPolicy(ctx, n, dir, addr, cpus, p)
		if err := x.shareProfile(); err != nil {
			return cell, err
		}
		cell.Runs = append(cell.Runs, run)
		if ctx.Err() != nil {
			return cell, ctx.Err()
		}
	}
	if x.cfg.Train {
		cell.Runs = append(cell.Runs, x.runTrainer(ctx, n, dir, addr, cpus))
		if ctx.Err() != nil {
			return cell, ctx.Err()
		}
	}
	if x.cfg.Peer {
		cell.Runs = append(cell.Runs, x.runPeer(ctx, n, dir, cpus))
	}
	return cell, ctx.Err()
}

// cellDir is a cell's folder under Config.Out: "100mbit-cpu0.5", and
// "-rep2" after it for a repetition.
func cellDir(rate string, cpus float64, rep int) string {
	d := fmt.Sprintf("%s-cpu%s", rate, strconv.FormatFloat(cpus, 'f', -1, 64))
	if rep > 0 {
		d += fmt.Sprintf("-rep%d", rep)
	}
	return d
}

func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// groups makes the cell's cgroups: the storage side's CPU quota (and
// cpuset when pinned), and the compute side's cpuset when pinned. On error
// it removes what it made.
func (x *experiment) groups(n *node, cpus float64) error {
	seq := groupSeq.Add(1)
	g, err := cgroup.New(cgroup.Config{Name: fmt.Sprintf("%sst%d", netns.ProcessPrefix(), seq), CPUs: cpus, Cpuset: x.pin.storage})
	if err != nil {
		return err
	}
	if x.pin.compute != "" {
		c, err := cgroup.New(cgroup.Config{Name: fmt.Sprintf("%scp%d", netns.ProcessPrefix(), seq), Cpuset: x.pin.compute})
		if err != nil {
			return errors.Join(err, g.Close())
		}
		n.computeGroup = c
		n.cleanup = append(n.cleanup, c.Close)
	}
	n.storageGroup = g
	n.cleanup = append(n.cleanup, g.Close)
	return nil
}

// useCellProfile points the cell's runs at the profile of its rate and
// storage CPU, made from the experiment's samples when there is none yet.
// A compute agent keeps the running means of the resources it measured
// (link rate, storage speed, the last No-Off epoch) in the profile and
// plans from them when it reuses it, as a deployment reuses its profile;
// a cell of another rate or CPU is other hardware, so each cell has its
// own means, shared by its repetitions.
func (x *experiment) useCellProfile(rate string, cpus float64) error {
	x.cellProfile = filepath.Join(x.cfg.Out, fmt.Sprintf("profile-%s-cpu%s.zst", rate, strconv.FormatFloat(cpus, 'f', -1, 64)))
	if _, err := os.Stat(x.cellProfile); err == nil {
		return nil
	}
	return copySamples(x.profile, x.cellProfile)
}

// shareProfile makes the experiment's profile from the cell's once a run
// has recorded it (the first run of the first cell).
func (x *experiment) shareProfile() error {
	if _, err := os.Stat(x.profile); err == nil {
		return nil
	}
	return copySamples(x.cellProfile, x.profile)
}

// copySamples saves the profile at from, without its measured resources,
// at to; nothing when from does not exist yet.
func copySamples(from, to string) error {
	p, err := profiler.Load(from, "", "")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("profile %s: %w", from, err)
	}
	p.Resources = nil
	return profiler.Save(to, p)
}
