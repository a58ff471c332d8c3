// Package bed brings up the testbed's emulated nodes on one machine:
// storage and compute nodes as network namespaces joined by links shaped
// with tc (root), or as processes on loopback behind in-process shaping
// proxies, each storage node's processes under a cgroup of its own and the
// compute nodes' in one shared cpuset group. It starts the processes that
// run on the nodes, places them in their cgroups, stops them, and reads
// back the nodes' counters: the bytes on each link and a storage agent's
// CPU time.
//
// A Bed owns everything it made: Close stops its servers (SIGTERM, then
// SIGKILL to their process groups) and removes its cgroups and
// namespaces, last made first. Their names start with
// netns.ProcessPrefix(), so netns.Leftovers and cgroup.Leftovers find any
// a crash left.
package bed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"sync"

	"github.com/sophon-dl/sophon/testbed/cgroup"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// Errors.
var (
	// ErrConfig: the bed's configuration is invalid.
	ErrConfig = errors.New("bed: bad config")
)

// Config describes a bed.
type Config struct {
	// Netns puts the nodes in network namespaces joined by links shaped
	// with tc tbf: netns.NewLink for one storage and one compute node,
	// netns.NewStar otherwise. It needs root (netns.Available). False:
	// loopback, every process in this namespace and each storage node's
	// servers behind shaping proxies at its link's rate (Bed.Front).
	Netns bool
	// Label names the bed (its rate point) in progress lines and logs.
	Label string
	// Links is each storage node's link rate, one per storage node: at
	// least one.
	Links []shape.Rate
	// ComputeNodes is the compute nodes. Zero means 1.
	ComputeNodes int
	// ComputeLinks, when set, is each compute node's link rate, one per
	// compute node (netns.StarConfig.ComputeRates): the star only, in
	// netns mode.
	ComputeLinks []shape.Rate
	// WAN, when set, gives the two-node link a round trip, jitter and loss
	// through netns's user-space delay line (netns.Config's RTT, Jitter,
	// Loss, Seed and MTU). It needs Netns and one storage and one compute
	// node.
	WAN *netns.WAN
	// CongestionControl, when set, is every node namespace's TCP
	// congestion control (netns.Node.SetCongestion). It needs Netns.
	// Empty leaves the host's default, which new namespaces take.
	CongestionControl string
	// ComputeApart makes each compute node a machine of its own
	// (independent training jobs, not ranks of one): MakeGroups gives each
	// a group of its own with an equal part of the compute quota, which its
	// compute agent then plans with, instead of one group they share.
	ComputeApart bool
}

// Host names one node of a bed: storage node Index or compute node Index
// (from 0).
type Host struct {
	Storage bool
	Index   int
	// Unconfined: not placed in the node's cgroup (a server that stands
	// for another machine of the storage rack, such as the bucket's).
	Unconfined bool
}

// StorageHost and ComputeHost name storage node i and compute node i.
func StorageHost(i int) Host { return Host{Storage: true, Index: i} }
func ComputeHost(i int) Host { return Host{Index: i} }

// Bed is a set of emulated nodes. In netns mode they are the nodes of a
// netns.Topology (the two-node link for 1 x 1; the star otherwise), each
// storage node's processes in a cgroup of its own and the compute nodes'
// in one shared cpuset group when pinned (MakeGroups). On loopback every
// process runs in this namespace and each storage node's servers sit
// behind shaping proxies at its link's rate (Front).
type Bed struct {
	label string
	// topo is the namespaces (netns mode); nil on loopback.
	topo    *netns.Topology
	storage []*storageNode
	compute int
	// multi is set when there are several storage or compute nodes: the
	// link and CPU counters per storage node are then read too.
	multi bool
	// computeGroups hold the compute nodes' processes, with a quota of
	// computeCPUs cores and the compute cpuset when pinned: one group they
	// share, or with computeApart one per node with an equal part of the
	// quota; none without (MakeGroups).
	computeGroups []*cgroup.Group
	computeCPUs   float64
	computeApart  bool
	// proxyCtx ends the loopback proxies; proxyWG waits for them.
	proxyCtx context.Context
	proxyWG  sync.WaitGroup

	mu      sync.Mutex
	cleanup []func() error
}

// storageNode is one storage node of a bed.
type storageNode struct {
	// rate is its link's rate; host its address, where its servers listen
	// and the compute nodes dial it.
	rate shape.Rate
	host string
	// node is its namespace (netns mode); group its cgroup (nil without).
	node  *netns.Node
	group *cgroup.Group

	mu sync.Mutex
	// proxies shape its servers on loopback; agent is its storage agent's
	// pid (0 until SetStorageAgent).
	proxies []*shape.Proxy
	agent   int
}

// New brings up cfg's nodes and links; it makes no cgroups (MakeGroups
// does). On error it removes what it made.
func New(ctx context.Context, cfg Config) (*Bed, error) {
	if len(cfg.Links) == 0 {
		return nil, fmt.Errorf("%w: no storage links", ErrConfig)
	}
	if cfg.ComputeNodes == 0 {
		cfg.ComputeNodes = 1
	}
	if cfg.ComputeNodes < 1 {
		return nil, fmt.Errorf("%w: %d compute nodes", ErrConfig, cfg.ComputeNodes)
	}
	b := &Bed{label: cfg.Label, compute: cfg.ComputeNodes, multi: len(cfg.Links) > 1 || cfg.ComputeNodes > 1, computeApart: cfg.ComputeApart && cfg.ComputeNodes > 1}
	if cfg.WAN != nil && (!cfg.Netns || b.multi) {
		return nil, fmt.Errorf("%w: a WAN link (round trip, jitter, loss) needs netns mode and one storage and one compute node", ErrConfig)
	}
	if cfg.ComputeLinks != nil && (!cfg.Netns || !b.multi || len(cfg.ComputeLinks) != cfg.ComputeNodes) {
		return nil, fmt.Errorf("%w: compute links need netns mode, a star and one rate per compute node (%d for %d)", ErrConfig, len(cfg.ComputeLinks), cfg.ComputeNodes)
	}
	if cfg.CongestionControl != "" && !cfg.Netns {
		return nil, fmt.Errorf("%w: a congestion control (%s) needs netns mode: it is a namespace's sysctl", ErrConfig, cfg.CongestionControl)
	}
	for _, r := range cfg.Links {
		b.storage = append(b.storage, &storageNode{rate: r, host: "127.0.0.1"})
	}
	if !cfg.Netns {
		// Loopback: runs are sequential, so each storage node's proxies
		// carry one run's traffic at a time and their byte counts add up.
		pctx, cancel := context.WithCancel(context.Background())
		b.proxyCtx = pctx
		b.AtClose(func() error { cancel(); b.proxyWG.Wait(); return nil })
		return b, nil
	}
	var err error
	if !b.multi {
		lc := netns.Config{Rate: cfg.Links[0]}
		if w := cfg.WAN; w != nil {
			// A WAN cell is on the delay line even at RTT 0 without
			// jitter or loss: the grid's round trip is then the one thing
			// that differs between its cells.
			lc.RTT, lc.Jitter, lc.Loss, lc.Seed, lc.MTU, lc.DelayLine = w.RTT, w.Jitter, w.Loss, w.Seed, w.MTU, true
		}
		b.topo, err = netns.NewLink(ctx, lc)
	} else {
		b.topo, err = netns.NewStar(ctx, netns.StarConfig{StorageNodes: len(cfg.Links), ComputeNodes: b.compute, StorageRates: cfg.Links,
			ComputeRates: cfg.ComputeLinks})
	}
	if err != nil {
		return nil, err
	}
	b.AtClose(b.topo.Close)
	if cc := cfg.CongestionControl; cc != "" {
		for _, n := range b.topo.Nodes() {
			if err := n.SetCongestion(cc); err != nil {
				return nil, errors.Join(err, b.Close())
			}
		}
	}
	for i, s := range b.storage {
		s.node = b.topo.Storage[i]
		s.host = s.node.IP
	}
	return b, nil
}

// AtClose adds f to what Close does: the functions run last added first.
func (b *Bed) AtClose(f func() error) {
	b.mu.Lock()
	b.cleanup = append(b.cleanup, f)
	b.mu.Unlock()
}

// Close tears down what the bed made, last first: its servers, cgroups,
// proxies and namespaces.
func (b *Bed) Close() error {
	b.mu.Lock()
	cleanup := b.cleanup
	b.cleanup = nil
	b.mu.Unlock()
	var errs []error
	for i := len(cleanup) - 1; i >= 0; i-- {
		errs = append(errs, cleanup[i]())
	}
	return errors.Join(errs...)
}

// CongestionControl is the TCP congestion control the storage node's
// namespace runs with (each node's is the same: Config.CongestionControl
// or the host's default); "" on loopback or when it cannot be read.
func (b *Bed) CongestionControl() string {
	if b.topo == nil {
		return ""
	}
	cc, err := b.topo.Storage[0].Congestion()
	if err != nil {
		return ""
	}
	return cc
}

// Label is Config.Label.
func (b *Bed) Label() string { return b.label }

// Netns reports whether the nodes are namespaces (and Counters the
// kernel's) rather than loopback (and the shaping proxies').
func (b *Bed) Netns() bool { return b.topo != nil }

// Topology is the bed's namespaces; nil on loopback.
func (b *Bed) Topology() *netns.Topology { return b.topo }

// StorageNodes and ComputeNodes are the bed's nodes of each kind.
func (b *Bed) StorageNodes() int { return len(b.storage) }
func (b *Bed) ComputeNodes() int { return b.compute }

// StorageHosts are the storage nodes' addresses, in node order: where
// their servers listen (127.0.0.1 on loopback).
func (b *Bed) StorageHosts() []string {
	var out []string
	for _, s := range b.storage {
		out = append(out, s.host)
	}
	return out
}

// StorageGroup is storage node i's cgroup and ComputeGroup compute node
// 0's; nil without (no MakeGroups, or no compute quota nor cpuset).
func (b *Bed) StorageGroup(i int) *cgroup.Group { return b.storage[i].group }
func (b *Bed) ComputeGroup() *cgroup.Group      { return b.group(ComputeHost(0)) }

// ComputeQuota is the compute nodes' CPU quota in cores (MakeGroups'
// compute), all of them together; 0 without a compute group.
func (b *Bed) ComputeQuota() float64 { return b.computeCPUs }

// ComputeNodeQuota is what one compute node's agent may use of it: all of
// it when the nodes share their group, its part with Config.ComputeApart.
func (b *Bed) ComputeNodeQuota() float64 {
	if len(b.computeGroups) > 1 {
		return b.computeCPUs / float64(len(b.computeGroups))
	}
	return b.computeCPUs
}

// SetStorageAgent names storage node i's storage agent, whose CPU time
// Counters reads with several nodes.
func (b *Bed) SetStorageAgent(i, pid int) {
	s := b.storage[i]
	s.mu.Lock()
	s.agent = pid
	s.mu.Unlock()
}

// Command returns a command running name with args on node h, in its own
// process group, killed with it when ctx ends (netns.GroupCommand). Where
// h has a cgroup the program is born in it: a shell joins the group and
// execs it (joinScript) in the node's network namespace, with the
// machine's mounts (netns.Node.NetCommand), so that the program reads its
// group's CPU limit as one in a container does (the compute agent plans
// with it). Otherwise it runs through `ip netns exec`, and Place puts it
// in the group once started.
func (b *Bed) Command(ctx context.Context, h Host, name string, args ...string) *exec.Cmd {
	if b.topo == nil {
		return netns.GroupCommand(ctx, name, args...)
	}
	nodes := b.topo.Compute
	if h.Storage {
		nodes = b.topo.Storage
	}
	n := nodes[h.Index]
	if g := b.group(h); g != nil {
		return n.NetCommand(ctx, "sh", joinArgs(g.Paths(), name, args)...)
	}
	return n.Command(ctx, name, args...)
}

// Place moves a started process on node h into its cgroup, if it has one
// (a command from Command is there already: moving it again does
// nothing).
func (b *Bed) Place(h Host, pid int) error {
	if g := b.group(h); g != nil {
		return g.Add(pid)
	}
	return nil
}

// Dial connects from the first compute node.
func (b *Bed) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if b.topo == nil {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	return b.topo.Compute[0].Dial(ctx, "tcp", addr)
}

// ListenAddr is where a server on storage node i listens: port at the
// node's address in netns mode; on loopback, where every server shares
// this namespace, a free port of 127.0.0.1.
func (b *Bed) ListenAddr(i int, port string) (string, error) {
	if b.topo != nil {
		return net.JoinHostPort(b.storage[i].host, port), nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// Front puts a shaping proxy at storage node i's link rate in front of
// its server at target and returns the address to dial (loopback); in
// netns mode the link shapes, and target is returned as it is. Close ends
// the proxies.
func (b *Bed) Front(i int, target string) (string, error) {
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

// RemoveLeftovers removes the namespaces, links and cgroups this process
// made (named after it, netns.ProcessPrefix) and did not remove, and
// says what they were: a package's TestMain fails its run on any.
func RemoveLeftovers() []string {
	prefix := netns.ProcessPrefix()
	left, _ := netns.Leftovers(prefix)
	if len(left) > 0 {
		netns.Remove(prefix)
	}
	if cgroup.Available() == nil {
		if groups, _ := cgroup.Leftovers(prefix); len(groups) > 0 {
			cgroup.Remove(prefix)
			left = append(left, groups...)
		}
	}
	return left
}
