package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/testbed/shape"
)

// This file lays out and sets up topologies: the two-node link ([NewLink],
// what [Setup] makes) and the star of N storage and M compute nodes
// ([NewStar]).
//
// The two-node link:
//
//	<prefix>-s                                   <prefix>-c
//	[<prefix>s .1] ==== veth, tbf both ends ==== [<prefix>c .2]
//
// With a round trip, jitter or loss (Config.WAN), the same link on the
// delay line of this process (delayline.go): a TUN device at each end,
// same names and addresses, tbf on both.
//
//	[<prefix>s .1 tun] <== this process: delay, jitter, loss ==> [<prefix>c .2 tun]
//
// The star: every node a namespace of its own, its one interface the end
// of a veth pair whose other end is a port of the bridge in the hub
// namespace. A storage link is shaped at both ends (the node's end: what
// it sends; the hub's end: what it receives); compute links are not.
//
//	<prefix>-s1 [s1 .1]==tbf==tbf[hub-s1]--+
//	<prefix>-s2 [s2 .2]==tbf==tbf[hub-s2]--+-- br0 in <prefix>-h
//	<prefix>-c1 [c1 .3]=========[hub-c1]---+   (no address)
//	<prefix>-c2 [c2 .4]=========[hub-c2]---+

// Role is a node's part in a topology.
type Role string

// Roles of the nodes.
const (
	RoleStorage Role = "storage"
	RoleCompute Role = "compute"
)

// Bridge is the name of the star's bridge, inside its hub namespace.
const Bridge = "br0"

// Node is one emulated node of a [Topology]: a network namespace whose one
// interface faces the other nodes. Its methods run programs, open sockets
// and read counters inside it.
type Node struct {
	// Role and Index (from 0 within the role) say which node it is.
	Role  Role
	Index int
	// NS is its namespace (ip netns), Dev its interface inside NS and IP
	// Dev's address (no prefix length).
	NS, Dev, IP string
	// Rate is the rate the node's link is shaped at, both ways; the zero
	// Rate when unshaped.
	Rate shape.Rate

	topo *Topology
}

// ShapedDev is one tbf qdisc a topology puts on: interface Dev of
// namespace NS sends at most Rate, from a bucket of Burst bytes.
type ShapedDev struct {
	NS, Dev string
	Rate    shape.Rate
	Burst   int
}

// Topology is a set of emulated nodes on one machine: the two-node link
// ([NewLink]) or the star ([NewStar]). Everything it makes is named from
// its Prefix and lives in its namespaces: [Topology.Close] (or [Remove]
// with the prefix, after a crash) deletes it all.
type Topology struct {
	// Prefix starts every name (Config.Prefix).
	Prefix string
	// Hub is the namespace holding the star's Bridge; "" for the link.
	Hub string
	// Storage and Compute are the nodes, in index order.
	Storage, Compute []*Node
	// Subnet is the nodes' IPv4 prefix: the storage nodes take its first
	// host addresses, the compute nodes the next.
	Subnet netip.Prefix
	// Shaped lists every tbf qdisc, in the order they are set up.
	Shaped []ShapedDev
	// Latency is the tbf latency of every qdisc.
	Latency time.Duration

	// WAN is the link's round trip, jitter and loss, when it runs on the
	// delay line (Config.WAN); nil otherwise.
	WAN *WAN

	steps    [][]string // the commands that set it up
	hostDevs []string   // link names in the caller's namespace a crashed run might leave
	devsAt   int        // on the delay line: the step before which the TUN devices are made
	line     *delayLine // on the delay line, once set up
	lineCfg  lineConfig

	ctx    context.Context // ended by Close: cancels the commands
	cancel context.CancelFunc
	once   sync.Once
	err    error
	mu     sync.Mutex // guards line, and Shaped once set up (SetRate)
}

// StarConfig describes a star. Zero fields take the defaults noted; of the
// embedded Config, Rate is every storage link's rate (unless StorageRates
// is set) and Burst, when set, every qdisc's bucket.
type StarConfig struct {
	Config
	// StorageNodes and ComputeNodes are the numbers of nodes. Zero means 1.
	StorageNodes, ComputeNodes int
	// StorageRates, when set, holds one rate per storage node: its link's,
	// in place of Rate. Each must be set.
	StorageRates []shape.Rate
	// ComputeRates, when set, holds one rate per compute node: its link's,
	// shaped at both ends as a storage link is (a zero Rate leaves it
	// unshaped). Unset: compute links are not shaped.
	ComputeRates []shape.Rate
}

// NewLink sets up the two-node link: namespaces <prefix>-s (storage) and
// <prefix>-c (compute), a veth pair <prefix>s, <prefix>c between them,
// their addresses and loopbacks, and a tbf qdisc at cfg.Rate on both ends
// when it is set. A stale namespace or link of the same name (from a run
// that was killed) is removed first. On any error it undoes what it did.
func NewLink(ctx context.Context, cfg Config) (*Topology, error) {
	t, err := linkLayout(cfg)
	if err != nil {
		return nil, err
	}
	return t, t.setup(ctx)
}

// NewStar sets up cfg.StorageNodes storage and cfg.ComputeNodes compute
// nodes: namespaces <prefix>-s1.. and <prefix>-c1.., each with one veth end
// (s1.., c1..) whose peer (hub-s1..) is a port of bridge br0 in namespace
// <prefix>-h, which has no address. Each storage link is shaped with tbf
// at its rate at both ends (what the node sends and what the hub sends
// it); compute links are not shaped unless cfg.ComputeRates says so. Stale
// namespaces of the same names
// are removed first; on any error it undoes what it did.
func NewStar(ctx context.Context, cfg StarConfig) (*Topology, error) {
	t, err := starLayout(cfg)
	if err != nil {
		return nil, err
	}
	return t, t.setup(ctx)
}

// linkLayout works out the two-node link's names, addresses, qdiscs and
// set-up commands. On the delay line (cfg.WAN()) the ends are TUN
// devices, which setup makes between the namespaces' creation and the
// rest.
func linkLayout(cfg Config) (*Topology, error) {
	cfg, pfx, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := newTopology(cfg, pfx)
	s := t.addNode(RoleStorage, 0, cfg.Prefix+"-s", cfg.Prefix+"s", cfg.Rate)
	c := t.addNode(RoleCompute, 0, cfg.Prefix+"-c", cfg.Prefix+"c", cfg.Rate)
	t.hostDevs = []string{s.Dev, c.Dev}
	t.steps = [][]string{
		{"ip", "netns", "add", s.NS},
		{"ip", "netns", "add", c.NS},
	}
	if cfg.WAN() {
		t.WAN = &WAN{RTT: cfg.RTT, Jitter: cfg.Jitter, Loss: cfg.Loss, Seed: cfg.Seed, MTU: cfg.MTU}
		t.lineCfg = cfg.lineConfig()
		t.devsAt = len(t.steps)
		for _, n := range []*Node{s, c} {
			t.steps = append(t.steps, t.tunSteps(n, cfg.MTU)...)
			t.shape(n.NS, n.Dev, n.Rate, cfg.Burst)
		}
		return t, nil
	}
	// Created straight inside the namespaces: nothing is ever left in the
	// caller's namespace.
	t.steps = append(t.steps, []string{"ip", "link", "add", s.Dev, "netns", s.NS, "type", "veth", "peer", "name", c.Dev, "netns", c.NS})
	for _, n := range []*Node{s, c} {
		t.steps = append(t.steps, t.endSteps(n)...)
		t.shape(n.NS, n.Dev, n.Rate, cfg.Burst)
	}
	return t, nil
}

// starLayout works out the star's names, addresses, qdiscs and set-up
// commands.
func starLayout(sc StarConfig) (*Topology, error) {
	cfg, pfx, err := sc.Config.withDefaults()
	if err != nil {
		return nil, err
	}
	ns, nc := sc.StorageNodes, sc.ComputeNodes
	if ns == 0 {
		ns = 1
	}
	if nc == 0 {
		nc = 1
	}
	if ns < 0 || nc < 0 {
		return nil, fmt.Errorf("%w: %d storage and %d compute nodes", ErrConfig, ns, nc)
	}
	if hosts := 1<<(32-pfx.Bits()) - 2; ns+nc > hosts {
		return nil, fmt.Errorf("%w: subnet %s has %d host addresses, too few for %d storage and %d compute nodes", ErrConfig, pfx, hosts, ns, nc)
	}
	if cfg.WAN() {
		return nil, fmt.Errorf("%w: the delay line (RTT, jitter, loss) is for the two-node link only", ErrConfig)
	}
	if sc.StorageRates != nil && len(sc.StorageRates) != ns {
		return nil, fmt.Errorf("%w: %d storage rates for %d storage nodes", ErrConfig, len(sc.StorageRates), ns)
	}
	if sc.ComputeRates != nil && len(sc.ComputeRates) != nc {
		return nil, fmt.Errorf("%w: %d compute rates for %d compute nodes", ErrConfig, len(sc.ComputeRates), nc)
	}
	t := newTopology(cfg, pfx)
	t.Hub = cfg.Prefix + "-h"
	t.steps = [][]string{
		{"ip", "netns", "add", t.Hub},
		{"ip", "-n", t.Hub, "link", "add", Bridge, "type", "bridge"},
		{"ip", "-n", t.Hub, "link", "set", Bridge, "addrgenmode", "none"},
		{"ip", "-n", t.Hub, "link", "set", Bridge, "up"},
	}
	add := func(role Role, i int, rate shape.Rate) {
		name := string(role[0]) + strconv.Itoa(i+1) // s1, c1
		n := t.addNode(role, i, cfg.Prefix+"-"+name, name, rate)
		port := "hub-" + name
		t.steps = append(t.steps,
			[]string{"ip", "netns", "add", n.NS},
			[]string{"ip", "link", "add", port, "netns", t.Hub, "type", "veth", "peer", "name", n.Dev, "netns", n.NS},
			[]string{"ip", "-n", t.Hub, "link", "set", port, "master", Bridge},
			[]string{"ip", "-n", t.Hub, "link", "set", port, "addrgenmode", "none"},
			[]string{"ip", "-n", t.Hub, "link", "set", port, "up"},
		)
		t.steps = append(t.steps, t.endSteps(n)...)
		t.shape(n.NS, n.Dev, rate, cfg.Burst) // what the node sends
		t.shape(t.Hub, port, rate, cfg.Burst) // what it receives
	}
	for i := range ns {
		rate := cfg.Rate
		if sc.StorageRates != nil {
			if rate = sc.StorageRates[i]; rate.IsZero() {
				return nil, fmt.Errorf("%w: storage rate %d is unset", ErrConfig, i+1)
			}
		}
		add(RoleStorage, i, rate)
	}
	for i := range nc {
		var rate shape.Rate
		if sc.ComputeRates != nil {
			rate = sc.ComputeRates[i]
		}
		add(RoleCompute, i, rate)
	}
	return t, nil
}

func newTopology(cfg Config, pfx netip.Prefix) *Topology {
	t := &Topology{Prefix: cfg.Prefix, Subnet: pfx, Latency: cfg.Latency}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t
}

// addNode adds the next node, with the next host address of the subnet.
func (t *Topology) addNode(role Role, index int, ns, dev string, rate shape.Rate) *Node {
	ip := t.Subnet.Addr().Next()
	for range len(t.Storage) + len(t.Compute) {
		ip = ip.Next()
	}
	n := &Node{Role: role, Index: index, NS: ns, Dev: dev, IP: ip.String(), Rate: rate, topo: t}
	if role == RoleStorage {
		t.Storage = append(t.Storage, n)
	} else {
		t.Compute = append(t.Compute, n)
	}
	return n
}

// endSteps bring up a node's loopback and its interface with its address.
// No interface of the topology generates an IPv6 link-local address
// (addrgenmode none): with one, the kernel sends duplicate-address probes,
// router solicitations and MLD reports for a few seconds after the link
// comes up, which the byte counters of both ends then count at slightly
// different moments (a 90-byte MLDv2 report made TestNetnsNoLeftovers'
// two ends disagree). The testbed speaks IPv4 only.
func (t *Topology) endSteps(n *Node) [][]string {
	return [][]string{
		{"ip", "-n", n.NS, "link", "set", "lo", "up"},
		{"ip", "-n", n.NS, "addr", "add", n.IP + "/" + strconv.Itoa(t.Subnet.Bits()), "dev", n.Dev},
		{"ip", "-n", n.NS, "link", "set", n.Dev, "addrgenmode", "none"},
		{"ip", "-n", n.NS, "link", "set", n.Dev, "up"},
	}
}

// shape adds a tbf qdisc on dev in ns at rate (nothing for the zero Rate)
// to the layout; a burst of zero means shape.DefaultBurst(rate).
func (t *Topology) shape(ns, dev string, rate shape.Rate, burst int) {
	if rate.IsZero() {
		return
	}
	if burst == 0 {
		burst = shape.DefaultBurst(rate.Bits())
	}
	t.Shaped = append(t.Shaped, ShapedDev{NS: ns, Dev: dev, Rate: rate, Burst: burst})
	t.steps = append(t.steps, append([]string{"tc", "-n", ns, "qdisc", "add"}, tbfArgs(dev, rate, burst, t.Latency)...))
}

// setup removes stale namespaces and links of the same names, then runs
// the layout's commands; on the delay line it makes the TUN devices once
// the namespaces exist, and at the end raises the TCP buffers and starts
// the line. On an error it closes the topology.
func (t *Topology) setup(ctx context.Context) error {
	if err := removeNames(ctx, t.Namespaces(), t.hostDevs); err != nil {
		t.cancel()
		return err
	}
	var devs [2]*os.File
	for i, s := range t.steps {
		if t.WAN != nil && i == t.devsAt {
			var err error
			if devs[0], devs[1], err = t.openDevs(); err != nil {
				return errors.Join(err, t.Close())
			}
			// From here Close closes the devices.
			line, err := startLine(t.lineCfg, devs[0], devs[1])
			if err != nil {
				return errors.Join(err, t.Close())
			}
			t.mu.Lock()
			t.line = line
			t.mu.Unlock()
		}
		if err := run(ctx, s...); err != nil {
			return errors.Join(err, t.Close())
		}
	}
	if t.WAN != nil {
		for _, n := range t.Nodes() {
			if err := raiseTCPBuffers(n.NS); err != nil {
				return errors.Join(err, t.Close())
			}
		}
	}
	return nil
}

// WAN is what the delay line does to the two-node link (Config's fields
// of the same names).
type WAN struct {
	RTT, Jitter time.Duration
	Loss        float64
	Seed        int64
	MTU         int
}

// String says it as the report's header does: "rtt 40ms, jitter 5ms,
// loss 0.1% (delay line, mtu 1500)".
func (w WAN) String() string {
	return fmt.Sprintf("rtt %v, jitter %v, loss %s (delay line, mtu %d)", w.RTT, w.Jitter, strconv.FormatFloat(100*w.Loss, 'g', 4, 64)+"%", w.MTU)
}

// LineStats returns what the delay line has carried, dropped and lost so
// far in each direction; zeros when the link has no delay line.
func (t *Topology) LineStats() (toCompute, toStorage LineStats) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.line == nil {
		return LineStats{}, LineStats{}
	}
	return t.line.stats()
}

// Nodes are the storage nodes, then the compute nodes.
func (t *Topology) Nodes() []*Node {
	return append(append([]*Node(nil), t.Storage...), t.Compute...)
}

// Namespaces names every namespace of the topology: the nodes', then the
// hub's.
func (t *Topology) Namespaces() []string {
	var out []string
	for _, n := range t.Nodes() {
		out = append(out, n.NS)
	}
	if t.Hub != "" {
		out = append(out, t.Hub)
	}
	return out
}

// Close kills every process inside the topology's namespaces (the
// commands' process groups first), then deletes the namespaces; the veth
// ends, the bridge and the qdiscs go with them. It is safe to call twice
// and returns the same joined errors each time.
func (t *Topology) Close() error {
	t.once.Do(func() {
		t.cancel()
		t.mu.Lock()
		line := t.line
		t.mu.Unlock()
		var lerr error
		if line != nil {
			// First: the devices go with their files.
			lerr = line.close()
		}
		t.err = errors.Join(lerr, removeNames(context.Background(), t.Namespaces(), t.hostDevs))
	})
	return t.err
}

// Command returns a command running name with args inside the node's
// namespace, through `ip netns exec`, which execs the program itself: the
// command's pid is the program's. It runs in its own process group; ending
// ctx or closing the topology kills the whole group (Close also kills
// whatever else runs in the namespaces), and the program gets SIGKILL if
// this process dies first (Pdeathsig; its children do not, but
// RemoveOnSignal's Remove kills them).
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(n.topo.ctx, cancel)
	return GroupCommand(ctx, "ip", append([]string{"netns", "exec", n.NS, name}, args...)...)
}

// NetCommand is Command but for the mounts: the program enters the
// node's network namespace only (nsenter --net), and keeps this process's
// mounts, where `ip netns exec` mounts the namespace's own /sys and so
// hides the cgroup file systems under /sys/fs/cgroup. A program that
// reads its own cgroup's CPU limit, as one in a container does, runs
// this way.
func (n *Node) NetCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(n.topo.ctx, cancel)
	return GroupCommand(ctx, "nsenter", append([]string{"--net=/run/netns/" + n.NS, "--", name}, args...)...)
}

// Listen opens a listener inside the node's namespace: the socket is made
// on an OS thread that has joined the namespace, and stays in it.
func (n *Node) Listen(network, addr string) (net.Listener, error) {
	var lis net.Listener
	err := n.inNamespace(func() (err error) {
		lis, err = net.Listen(network, addr)
		return err
	})
	return lis, err
}

// Dial connects from inside the node's namespace.
func (n *Node) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.inNamespace(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Counters reads the kernel counters of the node's interface. It enters
// the namespace on a locked OS thread (setns) to read
// /proc/thread-self/net/dev, so it is cheap enough to poll every few
// milliseconds.
func (n *Node) Counters() (DevCounters, error) {
	if n.topo.ctx.Err() != nil {
		return DevCounters{}, ErrClosed
	}
	return devCounters(n.NS, n.Dev)
}

// Qdisc reads the counters of the root qdisc on the node's interface,
// through `tc -s -j qdisc show`.
func (n *Node) Qdisc(ctx context.Context) (QdiscStats, error) {
	if n.topo.ctx.Err() != nil {
		return QdiscStats{}, ErrClosed
	}
	return rootQdisc(ctx, n.NS, n.Dev)
}

// inNamespace runs f on an OS thread that has joined the node's namespace.
func (n *Node) inNamespace(f func() error) error {
	if n.topo.ctx.Err() != nil {
		return ErrClosed
	}
	return withNamespace(n.NS, f)
}
