// Package netns emulates a storage node and a GPU node on one machine: two
// network namespaces joined by a veth pair, each end shaped with a tc token
// bucket filter (tbf) so that both directions of the link run at a chosen
// rate. It drives iproute2 (`ip`, `tc`) through os/exec and needs root.
//
// Everything it creates is named from a prefix ([Config.Prefix]), so
// [Leftovers] and [Remove] can find what a crashed run left behind.
// [Pair.Close] kills every process inside the two namespaces and deletes
// them; the veth ends and their qdiscs go with them.
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
	// ErrClosed: the pair was closed.
	ErrClosed = errors.New("netns: pair closed")
)

// MaxPrefix is the longest prefix: a veth name (<prefix>s) must fit the
// kernel's 15-byte interface names.
const MaxPrefix = 14

// DefaultLatency is tbf's latency: how long a packet may wait in the
// bucket's queue before it is dropped. It sets the queue length to
// rate x latency + burst.
const DefaultLatency = 50 * time.Millisecond

// Config describes the pair. Zero fields take the defaults noted.
type Config struct {
	// Prefix names everything: namespaces <prefix>-s (storage) and
	// <prefix>-c (compute), veth ends <prefix>s and <prefix>c. At most
	// MaxPrefix bytes of [A-Za-z0-9_.-]. Empty means a name unique to this
	// process and call: ProcessPrefix() followed by a counter.
	Prefix string
	// Rate is the tc rate of each direction. The zero Rate means
	// unshaped.
	Rate shape.Rate
	// Subnet is an IPv4 prefix of /30 or wider, e.g. "10.213.7.0/24": the
	// storage end takes its first host address (.1), the compute end the
	// second (.2). Empty means 10.213.<n>.0/24 with n drawn from the
	// process id and a counter. The addresses live only inside the two
	// namespaces, so they never clash with the host's.
	Subnet string
	// Burst is tbf's bucket size in bytes. Zero means shape.DefaultBurst:
	// the bytes the rate sends in 4 ms, and at least 64 KiB (one GSO packet,
	// which tbf would otherwise split).
	Burst int
	// Latency is tbf's queueing latency. Zero means DefaultLatency.
	Latency time.Duration
}

// Pair is a set-up pair of namespaces. Create it with [Setup]; release it
// with [Pair.Close].
type Pair struct {
	// StorageNS and ComputeNS are the namespaces' names (ip netns).
	StorageNS, ComputeNS string
	// StorageIP and ComputeIP are the veth ends' addresses (no prefix
	// length).
	StorageIP, ComputeIP string
	// StorageDev and ComputeDev are the veth ends' interface names, each
	// inside its namespace.
	StorageDev, ComputeDev string
	// Rate is the configured tc rate (the zero Rate when unshaped).
	Rate shape.Rate

	ctx    context.Context // ended by Close: cancels the commands
	cancel context.CancelFunc
	once   sync.Once
	err    error
}

var counter atomic.Uint32

// ProcessPrefix is the prefix every default name of this process starts
// with: "sph-<pid>-". Pass it to Leftovers or Remove to find or remove what
// this process created.
func ProcessPrefix() string { return fmt.Sprintf("sph-%d-", os.Getpid()) }

var validPrefix = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// layout is what a validated Config works out to.
type layout struct {
	storageIP, computeIP netip.Addr
	prefixLen            int
}

// withDefaults validates c and fills in its zero fields.
func (c Config) withDefaults() (Config, layout, error) {
	var l layout
	n := counter.Add(1)
	if c.Prefix == "" {
		c.Prefix = ProcessPrefix() + strconv.FormatUint(uint64(n%1296), 36) // at most 2 characters
	}
	if len(c.Prefix) > MaxPrefix || !validPrefix.MatchString(c.Prefix) {
		return c, l, fmt.Errorf("%w: prefix %q: want 1 to %d bytes of [A-Za-z0-9_.-]", ErrConfig, c.Prefix, MaxPrefix)
	}
	if c.Subnet == "" {
		c.Subnet = fmt.Sprintf("10.213.%d.0/24", (os.Getpid()+int(n))%250+1)
	}
	pfx, err := netip.ParsePrefix(c.Subnet)
	if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 30 {
		return c, l, fmt.Errorf("%w: subnet %q: want an IPv4 prefix of /30 or wider", ErrConfig, c.Subnet)
	}
	pfx = pfx.Masked()
	l.storageIP = pfx.Addr().Next()
	l.computeIP = l.storageIP.Next()
	l.prefixLen = pfx.Bits()
	if c.Burst < 0 || c.Latency < 0 {
		return c, l, fmt.Errorf("%w: negative burst or latency", ErrConfig)
	}
	if c.Burst == 0 {
		c.Burst = shape.DefaultBurst(c.Rate.Bits())
	}
	if c.Latency == 0 {
		c.Latency = DefaultLatency
	}
	return c, l, nil
}

// Setup creates the two namespaces, the veth pair between them, their
// addresses and loopbacks, and the tbf qdisc on both ends when Rate is set.
// A stale namespace or link of the same name (from a run that was killed)
// is removed first. On any error it undoes what it did.
func Setup(ctx context.Context, cfg Config) (*Pair, error) {
	cfg, l, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Pair{
		StorageNS:  cfg.Prefix + "-s",
		ComputeNS:  cfg.Prefix + "-c",
		StorageIP:  l.storageIP.String(),
		ComputeIP:  l.computeIP.String(),
		StorageDev: cfg.Prefix + "s",
		ComputeDev: cfg.Prefix + "c",
		Rate:       cfg.Rate,
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	// Stale leftovers of the same names: a namespace, or a veth end still
	// in this namespace when a run died between creating and moving it.
	if err := removeNames(ctx, []string{p.StorageNS, p.ComputeNS}, []string{p.StorageDev, p.ComputeDev}); err != nil {
		p.cancel()
		return nil, err
	}
	steps := [][]string{
		{"ip", "netns", "add", p.StorageNS},
		{"ip", "netns", "add", p.ComputeNS},
		// Created straight inside the namespaces: nothing is ever left in
		// the caller's namespace.
		{"ip", "link", "add", p.StorageDev, "netns", p.StorageNS, "type", "veth", "peer", "name", p.ComputeDev, "netns", p.ComputeNS},
	}
	for _, end := range []struct{ ns, dev, ip string }{{p.StorageNS, p.StorageDev, p.StorageIP}, {p.ComputeNS, p.ComputeDev, p.ComputeIP}} {
		steps = append(steps,
			[]string{"ip", "-n", end.ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", end.ns, "addr", "add", end.ip + "/" + strconv.Itoa(l.prefixLen), "dev", end.dev},
			[]string{"ip", "-n", end.ns, "link", "set", end.dev, "up"},
		)
		if !cfg.Rate.IsZero() {
			steps = append(steps, append([]string{"tc", "-n", end.ns, "qdisc", "add"}, tbfArgs(end.dev, cfg.Rate, cfg.Burst, cfg.Latency)...))
		}
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return nil, errors.Join(err, p.Close())
		}
	}
	return p, nil
}

// Command returns a command running name with args inside the storage
// namespace (storageSide) or the compute namespace, through `ip netns
// exec`, which execs the program itself: the command's pid is the
// program's. It runs in its own process group; ending ctx or closing the
// pair kills the whole group (Close also kills whatever else runs in the
// namespaces), and the program gets SIGKILL if this process dies first
// (Pdeathsig; its children do not, but RemoveOnSignal's Remove kills them).
func (p *Pair) Command(ctx context.Context, storageSide bool, name string, args ...string) *exec.Cmd {
	ns := p.ComputeNS
	if storageSide {
		ns = p.StorageNS
	}
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(p.ctx, cancel)
	return GroupCommand(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
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

// Close kills every process inside the two namespaces (the commands'
// process groups first), then deletes the namespaces; the veth ends and
// their qdiscs go with them. It is safe to call twice and returns the same
// joined errors each time.
func (p *Pair) Close() error {
	p.once.Do(func() {
		p.cancel()
		p.err = removeNames(context.Background(), []string{p.StorageNS, p.ComputeNS}, []string{p.StorageDev, p.ComputeDev})
	})
	return p.err
}

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
// the compute namespace: the socket is made on an OS thread that has
// joined the namespace, and stays in it.
func (p *Pair) Listen(storageSide bool, network, addr string) (net.Listener, error) {
	var lis net.Listener
	err := p.inNamespace(storageSide, func() (err error) {
		lis, err = net.Listen(network, addr)
		return err
	})
	return lis, err
}

// Dial connects from inside the storage namespace (storageSide) or the
// compute namespace.
func (p *Pair) Dial(ctx context.Context, storageSide bool, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := p.inNamespace(storageSide, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// inNamespace runs f on an OS thread that has joined one of the pair's
// namespaces.
func (p *Pair) inNamespace(storageSide bool, f func() error) error {
	if p.ctx.Err() != nil {
		return ErrClosed
	}
	ns := p.ComputeNS
	if storageSide {
		ns = p.StorageNS
	}
	return withNamespace(ns, f)
}
