package experiment

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sophon-dl/sophon/testbed"
	"github.com/sophon-dl/sophon/testbed/cgroup"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// point is one rate point of the grid: its label (a rate as given, or
// the per-link rates joined with "+"), its rate in bits per second (their
// sum) and each storage link's rate.
type point struct {
	label string
	bits  float64
	links []shape.Rate
}

// points are the grid's rate points: one per Config.Rates entry, each
// storage link at that rate, or the one point of Config.StorageRates.
func (c *Config) points() []point {
	if len(c.StorageRates) > 0 {
		p := point{label: shape.Rates(c.StorageRates).String(), links: c.StorageRates}
		p.label = strings.ReplaceAll(p.label, ",", "+")
		for _, r := range c.StorageRates {
			p.bits += r.Bits()
		}
		return []point{p}
	}
	out := make([]point, len(c.Rates))
	for i, r := range c.Rates {
		links := make([]shape.Rate, c.StorageNodes)
		for j := range links {
			links[j] = r
		}
		out[i] = point{label: r.String(), bits: r.Bits(), links: links}
	}
	return out
}

// host names one node of a bed: storage node i or compute node i (from 0).
type host struct {
	storage bool
	i       int
	// unconfined: not placed in the node's cgroup (the bucket's server,
	// which stands for another machine of the storage rack).
	unconfined bool
}

// storageHost and computeHost name storage node i and compute node i.
func storageHost(i int) host { return host{storage: true, i: i} }
func computeHost(i int) host { return host{i: i} }

// bed is one cell's emulated nodes: Config.StorageNodes storage nodes and
// Config.ComputeNodes compute nodes. In netns mode they are the nodes of a
// netns.Topology (the two-node link for 1 x 1, exactly as before; the star
// otherwise), each storage node's processes in a cgroup of its own and the
// compute nodes' in one shared cpuset group when pinned. On loopback every
// process runs in this namespace and each storage node's servers sit
// behind shaping proxies at its link's rate (front).
type bed struct {
	mode string
	// label is the cell's rate point, for progress lines and logs.
	label string
	// topo is the namespaces (netns mode); nil on loopback.
	topo    *netns.Topology
	storage []*storageNode
	compute int
	// multi is set when there are several storage or compute nodes: the
	// link and CPU counters per storage node are then sampled too.
	multi bool
	// kernel is set when the counters are the kernel's (netns mode), not
	// the shaping proxies'.
	kernel bool
	// computeGroup holds the compute nodes' processes when pinned; nil
	// otherwise.
	computeGroup *cgroup.Group
	// proxyCtx ends the loopback proxies; proxyWG waits for them.
	proxyCtx context.Context
	proxyWG  sync.WaitGroup
	cleanup  []func() error
}

// storageNode is one storage node of a bed.
type storageNode struct {
	// name is its storage agent's --name (testbed.StorageName).
	name string
	// rate is its link's rate; host its address, where its servers listen
	// and the compute nodes dial it.
	rate shape.Rate
	host string
	// node is its namespace (netns mode); group its cgroup (nil without).
	node  *netns.Node
	group *cgroup.Group

	mu sync.Mutex
	// proxies shape its servers on loopback; agent is its storage agent's
	// pid (0 until started).
	proxies []*shape.Proxy
	agent   int
}

// newBed sets up a cell's nodes, links and CPU limits for rate point p
// and cpus storage cores per storage node. On error it removes what it
// made.
func (x *experiment) newBed(ctx context.Context, p point, cpus float64) (*bed, error) {
	b := &bed{mode: x.res.Mode, label: p.label, compute: x.cfg.ComputeNodes, multi: x.multi()}
	for i, r := range p.links {
		b.storage = append(b.storage, &storageNode{name: testbed.StorageName(i), rate: r, host: "127.0.0.1"})
	}
	if b.mode != results.ModeNetns {
		// Loopback: runs are sequential, so each storage node's proxies
		// carry one run's traffic at a time and their byte counts add up.
		pctx, cancel := context.WithCancel(context.Background())
		b.proxyCtx = pctx
		b.cleanup = append(b.cleanup, func() error { cancel(); b.proxyWG.Wait(); return nil })
		return b, nil
	}
	var err error
	if !b.multi {
		b.topo, err = netns.NewLink(ctx, netns.Config{Rate: p.links[0]})
	} else {
		b.topo, err = netns.NewStar(ctx, netns.StarConfig{StorageNodes: len(p.links), ComputeNodes: b.compute, StorageRates: p.links})
	}
	if err != nil {
		return nil, err
	}
	b.cleanup = append(b.cleanup, b.topo.Close)
	b.kernel = true
	for i, s := range b.storage {
		s.node = b.topo.Storage[i]
		s.host = s.node.IP
	}
	if cgroup.Available() == nil && !x.noCgroups {
		if err := x.groups(b, cpus); err != nil {
			// A cgroup hierarchy can be mounted yet refuse new groups
			// (read-only in a container): the agent's own --cpus budget
			// still limits its ops, so carry on and say so.
			x.noCgroups = true
			x.res.ModeNote += fmt.Sprintf("; cgroups could not be made (%v): the storage agent's --cpus budget alone limits it, and nothing is pinned", err)
			x.res.Machine.Pinning = "not pinned (no cgroups)"
			x.cfg.Log.Warn().Err(err).Msg("no cgroups: the storage agent's --cpus budget alone limits it")
		}
	}
	return b, nil
}

// close tears down what the bed made, last first.
func (b *bed) close() error {
	var errs []error
	for i := len(b.cleanup) - 1; i >= 0; i-- {
		errs = append(errs, b.cleanup[i]())
	}
	return errors.Join(errs...)
}

// command returns a command running name with args on node h.
func (b *bed) command(ctx context.Context, h host, name string, args ...string) *exec.Cmd {
	if b.topo == nil {
		return netns.GroupCommand(ctx, name, args...)
	}
	if h.storage {
		return b.topo.Storage[h.i].Command(ctx, name, args...)
	}
	return b.topo.Compute[h.i].Command(ctx, name, args...)
}

// place moves a started process on node h into its cgroup, if it has one.
func (b *bed) place(h host, pid int) error {
	if h.unconfined {
		return nil
	}
	g := b.computeGroup
	if h.storage {
		g = b.storage[h.i].group
	}
	if g == nil {
		return nil
	}
	return g.Add(pid)
}

// dial connects from the first compute node.
func (b *bed) dial(ctx context.Context, addr string) (net.Conn, error) {
	if b.topo == nil {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	return b.topo.Compute[0].Dial(ctx, "tcp", addr)
}

// front puts a shaping proxy at storage node i's link rate in front of
// its server at target and returns the address to dial (loopback); in
// netns mode the link shapes, and target is returned as it is.
func (b *bed) front(i int, target string) (string, error) {
	if b.topo != nil {
		return target, nil
	}
	s := b.storage[i]
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	px := &shape.Proxy{Target: target, Rate: s.rate}
	s.mu.Lock()
	s.proxies = append(s.proxies, px)
	s.mu.Unlock()
	b.proxyWG.Go(func() { _ = px.ServeListener(b.proxyCtx, lis) })
	return lis.Addr().String(), nil
}

// received reads the counters of a run (see counts): what each compute
// node's interface received (the shaping proxies' relayed bytes, all
// together, on loopback) and, with several nodes, what each storage node
// sent on its link and its storage agent's CPU time.
func (b *bed) received() (counts, error) {
	var c counts
	if b.topo != nil {
		for _, n := range b.topo.Compute {
			d, err := n.Counters()
			if err != nil {
				return c, err
			}
			c.rx = append(c.rx, int64(d.RxBytes))
			c.rxPackets = append(c.rxPackets, int64(d.RxPackets))
		}
	} else {
		c.rx, c.rxPackets = []int64{0}, []int64{0}
	}
	if !b.multi && b.topo != nil {
		return c, nil
	}
	for _, s := range b.storage {
		var sent int64
		if s.node != nil {
			d, err := s.node.Counters()
			if err != nil {
				return c, err
			}
			sent = int64(d.TxBytes)
		} else {
			s.mu.Lock()
			for _, p := range s.proxies {
				sent += p.Stats().Down
			}
			s.mu.Unlock()
			c.rx[0] += sent
		}
		if b.multi {
			s.mu.Lock()
			pid := s.agent
			s.mu.Unlock()
			var cpu time.Duration
			if pid > 0 {
				cpu = procCPU(pid)
			}
			c.links = append(c.links, sent)
			c.cpu = append(c.cpu, int64(cpu))
		}
	}
	return c, nil
}

// server is a background process of a cell (a storage agent, the peer's
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

// startServer starts a server on node h, places it in that node's cgroup
// and waits until addr answers (dialled from the first compute node). The
// server is stopped by b.close (SIGTERM, then SIGKILL to its group).
func (b *bed) startServer(ctx context.Context, h host, logPath, addr string, name string, args ...string) (*server, error) {
	ready := func(ctx context.Context) error {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := b.dial(dctx, addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	return b.startDaemon(ctx, h, logPath, "listening on "+addr, ready, name, args...)
}

// startDaemon starts a server on node h, places it in that node's cgroup
// and waits until ready returns nil (for at most 30 s; what names what it
// waits for, for the error). The server is stopped by b.close, or sooner
// by its stop.
func (b *bed) startDaemon(ctx context.Context, h host, logPath, what string, ready func(context.Context) error, name string, args ...string) (*server, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := b.command(ctx, h, name, args...)
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
	b.cleanup = append(b.cleanup, func() error {
		s.stop()
		return nil
	})
	if err := b.place(h, cmd.Process.Pid); err != nil {
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

// storageWeight is each storage agent's cgroup CPU weight, in default
// groups. A storage node's cores are its own: where the agents share the
// machine's cores (too few to pin), the weight gives a storage agent its
// quota whenever it is runnable, as on a node of its own, instead of a
// fair share against the compute agent's threads. With the default
// weight a storage agent got well under its quota while the compute
// agent's workers ran, and the link waited on it (docs/results.md, "Hits
// no longer hold requests back", has the figures).
const storageWeight = 16

// groups makes the cell's cgroups: each storage node's CPU quota (and
// cpuset when pinned), and the compute nodes' cpuset when pinned. On error
// it removes what it made.
func (x *experiment) groups(b *bed, cpus float64) error {
	seq := groupSeq.Add(1)
	var made []*cgroup.Group
	undo := func(err error) error {
		for _, g := range made {
			err = errors.Join(err, g.Close())
		}
		for _, s := range b.storage {
			s.group = nil
		}
		b.computeGroup = nil
		return err
	}
	for i, s := range b.storage {
		name := fmt.Sprintf("%sst%d", netns.ProcessPrefix(), seq)
		if len(b.storage) > 1 {
			name += "-" + strconv.Itoa(i+1)
		}
		g, err := cgroup.New(cgroup.Config{Name: name, CPUs: cpus, Cpuset: x.pin.storageCores(i), Weight: storageWeight})
		if err != nil {
			return undo(err)
		}
		made, s.group = append(made, g), g
	}
	if x.pin.compute != "" {
		c, err := cgroup.New(cgroup.Config{Name: fmt.Sprintf("%scp%d", netns.ProcessPrefix(), seq), Cpuset: x.pin.compute})
		if err != nil {
			return undo(err)
		}
		made, b.computeGroup = append(made, c), c
	}
	for _, g := range made {
		b.cleanup = append(b.cleanup, g.Close)
	}
	return nil
}
