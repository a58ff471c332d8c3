// Package netns emulates storage nodes and GPU nodes on one machine, each
// in a network namespace of its own, their links shaped with a tc token
// bucket filter (tbf) so that both directions run at a chosen rate. A
// [Topology] is either the two-node link ([NewLink]: two namespaces joined
// by one veth pair, both ends shaped; [Setup] wraps it as a [Pair]) or the
// star ([NewStar]: N storage and M compute namespaces, each joined to a
// bridge in a hub namespace, every storage link shaped at its own rate).
// It drives iproute2 (`ip`, `tc`) through os/exec and needs root.
//
// The two-node link can also be a WAN ([Config.RTT], Jitter, Loss): a TUN
// device at each end in place of the veth pair, and a delay line in this
// process that holds each packet for half the round trip, with jitter and
// loss from a seeded generator, while tbf still shapes both ends. The
// kernel needs no netem for it, only /dev/net/tun.
//
// Everything it creates is named from a prefix ([Config.Prefix]) and
// lives inside the namespaces it made, so [Leftovers] and [Remove] can
// find what a crashed run left behind. [Topology.Close] kills every
// process inside its namespaces and deletes them; the veth ends, the
// bridge and their qdiscs go with them.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sophon-dl/sophon/testbed/shape"
)

// Errors of the package.
var (
	// ErrUnavailable: namespaces cannot be made here (not root, no
	// iproute2, or the kernel refuses).
	ErrUnavailable = errors.New("netns: unavailable")
	// ErrConfig: the configuration is invalid.
	ErrConfig = errors.New("netns: bad config")
	// ErrClosed: the topology (or pair) was closed.
	ErrClosed = errors.New("netns: closed")
)

// MaxPrefix is the longest prefix: a veth name (<prefix>s) must fit the
// kernel's 15-byte interface names.
const MaxPrefix = 14

// DefaultLatency is tbf's latency: how long a packet may wait in the
// bucket's queue before it is dropped. It sets the queue length to
// rate x latency + burst.
const DefaultLatency = 50 * time.Millisecond

// Config describes the two-node link (and, embedded in StarConfig, the
// star). Zero fields take the defaults noted.
type Config struct {
	// Prefix names everything: for the link, namespaces <prefix>-s
	// (storage) and <prefix>-c (compute) and veth ends <prefix>s and
	// <prefix>c; for the star, see NewStar. At most
	// MaxPrefix bytes of [A-Za-z0-9_.-]. Empty means a name unique to this
	// process and call: ProcessPrefix() followed by a counter.
	Prefix string
	// Rate is the tc rate of each direction. The zero Rate means
	// unshaped.
	Rate shape.Rate
	// Subnet is an IPv4 prefix of /30 or wider, e.g. "10.213.7.0/24": the
	// storage end takes its first host address (.1), the compute end the
	// second (.2); in a star the storage nodes take the first ones and the
	// compute nodes the next. Empty means 10.213.<n>.0/24 with n drawn
	// from the process id and a counter. The addresses live only inside
	// the topology's namespaces, so they never clash with the host's.
	Subnet string
	// Burst is tbf's bucket size in bytes. Zero means shape.DefaultBurst:
	// the bytes the rate sends in 4 ms, and at least 64 KiB (one GSO packet,
	// which tbf would otherwise split).
	Burst int
	// Latency is tbf's queueing latency. Zero means DefaultLatency.
	Latency time.Duration

	// RTT is the round trip the two-node link adds: every packet is held
	// RTT/2 on its way, in each direction. Setting RTT, Jitter, Loss or
	// DelayLine builds the link from a TUN device in each namespace (same
	// names and addresses) joined by the user-space delay line of this
	// process (delayline.go), in place of the veth pair; tbf still shapes
	// each device's egress at Rate. Zero means no added delay. The star
	// refuses all four.
	RTT time.Duration
	// Jitter spreads each packet's one-way delay uniformly over RTT/2 ±
	// Jitter (never below zero), except that no packet is due before the
	// one ahead of it in its direction: nothing is reordered, and at a high
	// packet rate the mean delay rises towards RTT/2 + Jitter. Zero means
	// none.
	Jitter time.Duration
	// Loss is the probability that a packet is dropped, in each direction
	// on its own (as netem on both ends): 0.001 is 0.1%, and a round trip
	// then loses about 0.2%. Zero means none.
	Loss float64
	// Seed seeds the jitter and the loss draws: one stream per direction,
	// so the same packets meet the same fate.
	Seed int64
	// DelayLine builds the link on the delay line even when RTT, Jitter and
	// Loss are zero: to measure the delay line's own cost.
	DelayLine bool
	// MTU is the TUN devices' MTU, on the delay line only. Zero means
	// DefaultMTU (1500).
	MTU int
}

// Pair is a set-up two-node link seen as a storage side and a compute side.
// Create it with [Setup]; release it with [Pair.Close].
type Pair struct {
	// StorageNS and ComputeNS are the namespaces' names (ip netns).
	StorageNS, ComputeNS string
	// StorageIP and ComputeIP are the veth ends' (or, on the delay line,
	// the TUN devices') addresses (no prefix length).
	StorageIP, ComputeIP string
	// StorageDev and ComputeDev are the veth ends' (or the TUN devices')
	// interface names, each inside its namespace.
	StorageDev, ComputeDev string
	// Rate is the configured tc rate (the zero Rate when unshaped).
	Rate shape.Rate

	topo *Topology
}

var counter atomic.Uint32

// ProcessPrefix is the prefix every default name of this process starts
// with: "sph-<pid>-". Pass it to Leftovers or Remove to find or remove what
// this process created.
func ProcessPrefix() string { return fmt.Sprintf("sph-%d-", os.Getpid()) }

var validPrefix = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// withDefaults validates c and fills in its zero fields; it returns the
// subnet, masked.
func (c Config) withDefaults() (Config, netip.Prefix, error) {
	n := counter.Add(1)
	if c.Prefix == "" {
		c.Prefix = ProcessPrefix() + strconv.FormatUint(uint64(n%1296), 36) // at most 2 characters
	}
	if len(c.Prefix) > MaxPrefix || !validPrefix.MatchString(c.Prefix) {
		return c, netip.Prefix{}, fmt.Errorf("%w: prefix %q: want 1 to %d bytes of [A-Za-z0-9_.-]", ErrConfig, c.Prefix, MaxPrefix)
	}
	if c.Subnet == "" {
		c.Subnet = fmt.Sprintf("10.213.%d.0/24", (os.Getpid()+int(n))%250+1)
	}
	pfx, err := netip.ParsePrefix(c.Subnet)
	if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 30 {
		return c, netip.Prefix{}, fmt.Errorf("%w: subnet %q: want an IPv4 prefix of /30 or wider", ErrConfig, c.Subnet)
	}
	if c.Burst < 0 || c.Latency < 0 {
		return c, netip.Prefix{}, fmt.Errorf("%w: negative burst or latency", ErrConfig)
	}
	if c.Latency == 0 {
		c.Latency = DefaultLatency
	}
	if err := c.checkWAN(); err != nil {
		return c, netip.Prefix{}, err
	}
	return c, pfx.Masked(), nil
}

// Setup creates the two-node link (NewLink) and returns it as a Pair.
func Setup(ctx context.Context, cfg Config) (*Pair, error) {
	t, err := NewLink(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s, c := t.Storage[0], t.Compute[0]
	return &Pair{
		StorageNS: s.NS, ComputeNS: c.NS, StorageIP: s.IP, ComputeIP: c.IP, StorageDev: s.Dev, ComputeDev: c.Dev,
		Rate: s.Rate, topo: t,
	}, nil
}

// Topology is the pair as a Topology: one storage and one compute node.
func (p *Pair) Topology() *Topology { return p.topo }

// side is the storage node (storageSide) or the compute node.
func (p *Pair) side(storageSide bool) *Node {
	if storageSide {
		return p.topo.Storage[0]
	}
	return p.topo.Compute[0]
}

// Command returns a command running name with args inside the storage
// namespace (storageSide) or the compute namespace (see Node.Command).
func (p *Pair) Command(ctx context.Context, storageSide bool, name string, args ...string) *exec.Cmd {
	return p.side(storageSide).Command(ctx, name, args...)
}

// GroupCommand returns a command that runs in its own process group, gets
// SIGKILL if this process dies first (Pdeathsig), and whose whole group is
// killed when ctx ends (the program may have started children of its own).
func GroupCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// NB: the negative pid names the group.
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Close kills every process inside the two namespaces and deletes them
// (Topology.Close). It is safe to call twice.
func (p *Pair) Close() error { return p.topo.Close() }

// Leftovers lists the namespaces, and the links in this process's
// namespace, whose names start with prefix.
func Leftovers(prefix string) ([]string, error) {
	nss, err := namespaces(context.Background())
	var out []string
	for _, n := range nss {
		if strings.HasPrefix(n, prefix) {
			out = append(out, "netns "+n)
		}
	}
	links, lerr := links(context.Background())
	for _, l := range links {
		if strings.HasPrefix(l, prefix) {
			out = append(out, "link "+l)
		}
	}
	return out, errors.Join(err, lerr)
}

// Remove deletes what Leftovers lists for prefix, killing the processes
// inside those namespaces first. Tests call it from a signal handler and
// before they start, to clear what a killed run left.
func Remove(prefix string) error {
	ctx := context.Background()
	nss, err := namespaces(ctx)
	ls, lerr := links(ctx)
	var ns, dev []string
	for _, n := range nss {
		if strings.HasPrefix(n, prefix) {
			ns = append(ns, n)
		}
	}
	for _, l := range ls {
		if strings.HasPrefix(l, prefix) {
			dev = append(dev, l)
		}
	}
	return errors.Join(err, lerr, removeNames(ctx, ns, dev))
}

// removeNames kills the processes in the namespaces among ns that exist,
// deletes them, and deletes the links among devs present in this
// namespace.
func removeNames(ctx context.Context, ns, devs []string) error {
	have, err := namespaces(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range ns {
		if !contains(have, n) {
			continue
		}
		if err := killAll(ctx, n); err != nil {
			errs = append(errs, err)
		}
		if err := run(ctx, "ip", "netns", "del", n); err != nil {
			errs = append(errs, err)
		}
	}
	ls, err := links(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, d := range devs {
		if contains(ls, d) {
			if err := run(ctx, "ip", "link", "del", d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killAll sends SIGKILL to every process in namespace ns and to its
// process group, until none is left (a killed process leaves the
// namespace as it exits, before it is reaped) or 5 s pass.
func killAll(ctx context.Context, ns string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := output(ctx, "ip", "netns", "pids", ns)
		if err != nil {
			return err
		}
		pids := strings.Fields(out)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netns: %s: processes %s still running after SIGKILL", ns, strings.Join(pids, " "))
		}
		self := syscall.Getpgrp()
		for _, s := range pids {
			pid, err := strconv.Atoi(s)
			if err != nil || pid <= 1 || pid == os.Getpid() {
				continue
			}
			if pg, err := syscall.Getpgid(pid); err == nil && pg > 1 && pg != self {
				syscall.Kill(-pg, syscall.SIGKILL)
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// namespaces lists the named network namespaces (ip netns list).
func namespaces(ctx context.Context) ([]string, error) {
	out, err := output(ctx, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		// "name" or "name (id: 3)"
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// links lists the interfaces of this process's namespace.
func links(ctx context.Context) ([]string, error) {
	out, err := output(ctx, "ip", "-o", "link", "show")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		// "7: name@peer: <...> ..."
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		if i := strings.IndexByte(name, '@'); i >= 0 {
			name = name[:i]
		}
		names = append(names, name)
	}
	return names, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// run runs a command, returning its output in the error when it fails.
func run(ctx context.Context, args ...string) error {
	_, err := output(ctx, args...)
	return err
}

func output(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("netns: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

var (
	availOnce sync.Once
	availErr  error
)

// Available reports whether Setup can work here: nil when running as root
// with `ip` and `tc` that can create a namespace and a tbf qdisc in it;
// otherwise an error (wrapping ErrUnavailable) saying why, for skip
// messages. The probe runs once per process.
func Available() error {
	availOnce.Do(func() { availErr = probe() })
	return availErr
}

func probe() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (euid %d): network namespaces and tc need root", ErrUnavailable, os.Geteuid())
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s not found (install iproute2): %w", ErrUnavailable, tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := ProcessPrefix() + "probe"
	if len(name) > 15 {
		name = name[:15]
	}
	if err := run(ctx, "ip", "netns", "add", name); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer run(context.Background(), "ip", "netns", "del", name)
	if err := run(ctx, "tc", "-n", name, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1gbit", "burst", "64kb", "latency", "50ms"); err != nil {
		return fmt.Errorf("%w: tc tbf: %w", ErrUnavailable, err)
	}
	return nil
}

// Listen opens a listener inside the storage namespace (storageSide) or
// the compute namespace (see Node.Listen).
func (p *Pair) Listen(storageSide bool, network, addr string) (net.Listener, error) {
	return p.side(storageSide).Listen(network, addr)
}

// Dial connects from inside the storage namespace (storageSide) or the
// compute namespace.
func (p *Pair) Dial(ctx context.Context, storageSide bool, network, addr string) (net.Conn, error) {
	return p.side(storageSide).Dial(ctx, network, addr)
}
