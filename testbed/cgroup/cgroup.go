// Package cgroup limits the CPU of a process tree, so that the testbed can
// give an emulated storage node the cores of a real one: a CFS quota
// ([Config.CPUs]) and a cpuset ([Config.Cpuset]) on a control group that
// the caller moves processes into ([Group.Add]); the children they start
// afterwards inherit it.
//
// It drives the kernel's cgroup file systems directly and needs root. It
// uses the unified (v2) hierarchy when that has the cpu controller, and
// otherwise the v1 cpu, cpuacct and cpuset hierarchies: a machine may mount
// both, with the cpu controller on v1 only. Groups are made at the top of
// each hierarchy, as this process sees it (its cgroup namespace's root).
//
// The caller names every group from a prefix of its own (for instance
// netns.ProcessPrefix(), "sph-<pid>-"), so [Leftovers] and [Remove] can find
// what a killed run left behind. [Group.Close] kills every process still in
// the group and removes its directories.
package cgroup

import (
	"errors"
	"fmt"
	"github.com/sophon-dl/sophon/internal/cpuquota"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Errors of the package.
var (
	// ErrUnavailable: groups cannot be made here (not root, or no cpu
	// controller mounted, or a controller the config needs is missing).
	ErrUnavailable = errors.New("cgroup: unavailable")
	// ErrConfig: the configuration is invalid.
	ErrConfig = errors.New("cgroup: bad config")
	// ErrExists: a group of that name exists already, most likely left by a
	// killed run (see Remove).
	ErrExists = errors.New("cgroup: group exists")
	// ErrClosed: the group was closed.
	ErrClosed = errors.New("cgroup: group closed")
)

// Period is the CFS period of a quota: the group may run CPUs x Period of
// CPU time in every Period.
const Period = 100 * time.Millisecond

// MinCPUs is the smallest nonzero quota: the kernel refuses quotas under
// 1 ms per period.
const MinCPUs = 0.01

// MaxName is the longest group name.
const MaxName = 128

// fakeFlags are added to the flags write opens control files with: tests
// set O_CREATE|O_APPEND to fake a hierarchy with plain files.
var fakeFlags = 0

// killTimeout bounds how long Close and Remove wait for a group's
// processes to die and its directories to go.
const killTimeout = 5 * time.Second

// Config describes a group. Zero fields take the defaults noted.
type Config struct {
	// Name is the group's directory name in every hierarchy it uses: 1 to
	// MaxName bytes of [A-Za-z0-9_.-], not "." or "..". Start it with a
	// prefix of the caller's (e.g. netns.ProcessPrefix()) and pass that
	// prefix to Leftovers or Remove. Required.
	Name string
	// CPUs is the quota in cores: 0.25 lets the group use a quarter of one
	// core's time, 2 two cores' time, spread over any CPUs it may run on.
	// Zero means no quota; otherwise at least MinCPUs.
	CPUs float64
	// Cpuset pins the group to these CPUs, in the kernel's list format:
	// "1", "0-3,6". Empty means no pinning (the parent's CPUs).
	Cpuset string
	// Weight is the group's CPU weight in multiples of a default group's
	// (cpu.shares 1024 on v1, cpu.weight 100 on v2), at most MaxWeight:
	// when the CPUs are contended the group gets Weight times a default
	// group's share, within its quota. Zero means the default.
	Weight int
}

// MaxWeight is the largest Config.Weight: v2's cpu.weight tops at 10000.
const MaxWeight = 100

var (
	validName   = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	validCpuset = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)
)

func (c Config) validate() error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	if math.IsNaN(c.CPUs) || math.IsInf(c.CPUs, 0) || c.CPUs < 0 || (c.CPUs > 0 && c.CPUs < MinCPUs) {
		return fmt.Errorf("%w: CPUs %v: want 0 (no quota) or at least %v", ErrConfig, c.CPUs, MinCPUs)
	}
	if c.Weight < 0 || c.Weight > MaxWeight {
		return fmt.Errorf("%w: weight %d: want 0 (the default) to %d", ErrConfig, c.Weight, MaxWeight)
	}
	if c.Cpuset != "" && !validCpuset.MatchString(c.Cpuset) {
		return fmt.Errorf("%w: cpuset %q: want a CPU list such as \"1\" or \"0-3,6\"", ErrConfig, c.Cpuset)
	}
	return nil
}

func checkName(name string) error {
	if len(name) > MaxName || !validName.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("%w: name %q: want 1 to %d bytes of [A-Za-z0-9_.-], not . or ..", ErrConfig, name, MaxName)
	}
	return nil
}

// dir is one directory of a group, in one hierarchy.
type dir struct {
	path string
	v2   bool
}

// Group is a control group, made in one or more hierarchies. Create it
// with [New]; release it with [Group.Close].
type Group struct {
	dirs    []dir // in the order they were made
	cpu     dir   // holds the quota and cpu.stat
	acct    dir   // holds the usage; path "" when v1 has no cpuacct
	version int

	closed atomic.Bool
	once   sync.Once
	err    error
}

// New makes the group and applies cfg's limits. It fails with ErrExists
// when a directory of that name is there already, rather than take over a
// group it did not make. On any error it removes what it made.
func New(cfg Config) (*Group, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: not root (euid %d): cgroups need root", ErrUnavailable, os.Geteuid())
	}
	h, err := discover()
	if err != nil {
		return nil, err
	}
	g := &Group{}
	if err := g.make(h, cfg); err != nil {
		return nil, errors.Join(err, g.Close())
	}
	return g, nil
}

// make creates g's directories and writes its limits; Close undoes it.
func (g *Group) make(h hierarchies, cfg Config) error {
	quota := strconv.FormatInt(int64(math.Round(cfg.CPUs*float64(Period.Microseconds()))), 10)
	period := strconv.FormatInt(Period.Microseconds(), 10)
	switch {
	case h.v2 != "":
		g.version = 2
		want := []string{"cpu"}
		if cfg.Cpuset != "" && h.v2Cpuset {
			want = append(want, "cpuset")
		}
		if err := enable(h.v2, want); err != nil {
			return err
		}
		d, err := g.mkdir(h.v2, true, cfg.Name)
		if err != nil {
			return err
		}
		g.cpu, g.acct = d, d
		if cfg.CPUs > 0 {
			if err := write(d.path, "cpu.max", quota+" "+period); err != nil {
				return err
			}
		}
		if cfg.Weight > 0 {
			if err := write(d.path, "cpu.weight", strconv.Itoa(100*cfg.Weight)); err != nil {
				return err
			}
		}
	case h.cpu != "":
		g.version = 1
		d, err := g.mkdir(h.cpu, false, cfg.Name)
		if err != nil {
			return err
		}
		g.cpu = d
		if cfg.CPUs > 0 {
			if err := write(d.path, "cpu.cfs_period_us", period); err != nil {
				return err
			}
			if err := write(d.path, "cpu.cfs_quota_us", quota); err != nil {
				return err
			}
		}
		if cfg.Weight > 0 {
			if err := write(d.path, "cpu.shares", strconv.Itoa(1024*cfg.Weight)); err != nil {
				return err
			}
		}
		switch h.cpuacct {
		case "":
		case h.cpu: // co-mounted: one directory
			g.acct = d
		default:
			if g.acct, err = g.mkdir(h.cpuacct, false, cfg.Name); err != nil {
				return err
			}
		}
	default:
		return h.unavailable()
	}
	if cfg.Cpuset == "" {
		return nil
	}
	switch {
	case g.version == 2 && h.v2Cpuset:
		return write(g.cpu.path, "cpuset.cpus", cfg.Cpuset)
	case h.cpuset == "":
		return fmt.Errorf("%w: Cpuset %q: no cpuset controller in the hierarchy of cpu, and no v1 cpuset hierarchy", ErrUnavailable, cfg.Cpuset)
	}
	d := dir{path: filepath.Join(h.cpuset, cfg.Name)}
	if h.cpuset != h.cpu {
		var err error
		if d, err = g.mkdir(h.cpuset, false, cfg.Name); err != nil {
			return err
		}
	}
	// NB: a v1 cpuset group takes no task until both its cpus and its mems
	// are set; it starts with neither.
	mems, err := os.ReadFile(filepath.Join(h.cpuset, "cpuset.mems"))
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	if err := write(d.path, "cpuset.mems", strings.TrimSpace(string(mems))); err != nil {
		return err
	}
	return write(d.path, "cpuset.cpus", cfg.Cpuset)
}

// mkdir makes the group's directory under root and records it.
func (g *Group) mkdir(root string, v2 bool, name string) (dir, error) {
	d := dir{path: filepath.Join(root, name), v2: v2}
	if err := os.Mkdir(d.path, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return d, fmt.Errorf("%w: %s (left by a killed run? remove it with cgroup.Remove)", ErrExists, d.path)
		}
		return d, fmt.Errorf("cgroup: %w", err)
	}
	g.dirs = append(g.dirs, d)
	return d, nil
}

// enable turns the controllers on for the children of the v2 root, where
// they are not already. It leaves them on.
func enable(root string, controllers []string) error {
	b, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	on := strings.Fields(string(b))
	for _, c := range controllers {
		if slices.Contains(on, c) {
			continue
		}
		if err := write(root, "cgroup.subtree_control", "+"+c); err != nil {
			// EBUSY: root is not the true root and holds processes (the
			// "no internal processes" rule).
			return fmt.Errorf("%w: enabling %s for %s's children: %w", ErrUnavailable, c, root, err)
		}
	}
	return nil
}

// Add moves process pid (all its threads) into the group, in every
// hierarchy. The children it starts afterwards are born in the group;
// children it already has stay where they are, so add a process before it
// forks.
func (g *Group) Add(pid int) error {
	if g.closed.Load() {
		return ErrClosed
	}
	for _, d := range g.dirs {
		if err := write(d.path, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// CPUUsage is the CPU time the group's processes have used since it was
// made: cpuacct.usage (v1) or cpu.stat's usage_usec (v2).
func (g *Group) CPUUsage() (time.Duration, error) {
	if g.closed.Load() {
		return 0, ErrClosed
	}
	if g.acct.path == "" {
		return 0, fmt.Errorf("%w: no cpuacct hierarchy mounted", ErrUnavailable)
	}
	if g.acct.v2 {
		usec, err := stat(g.acct.path, "usage_usec")
		return time.Duration(usec) * time.Microsecond, err
	}
	b, err := os.ReadFile(filepath.Join(g.acct.path, "cpuacct.usage"))
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup: cpuacct.usage %q: %w", b, err)
	}
	return time.Duration(ns), nil
}

// Throttled reads cpu.stat: the periods in which the group ran and the
// periods in which it used up its quota and was held back. Both stay 0
// without a quota.
func (g *Group) Throttled() (periods, throttled int64, err error) {
	if g.closed.Load() {
		return 0, 0, ErrClosed
	}
	if periods, err = stat(g.cpu.path, "nr_periods"); err != nil {
		return 0, 0, err
	}
	throttled, err = stat(g.cpu.path, "nr_throttled")
	return periods, throttled, err
}

// Version is the cgroup version whose cpu controller holds the quota: 1
// or 2.
func (g *Group) Version() int { return g.version }

// Paths are the group's directories, one for each hierarchy it uses.
func (g *Group) Paths() []string {
	out := make([]string, len(g.dirs))
	for i, d := range g.dirs {
		out[i] = d.path
	}
	return out
}

// Close kills every process still in the group (SIGKILL, until none is
// left or 5 s pass), then removes the directories it made. It is safe to
// call twice and returns the same error each time.
func (g *Group) Close() error {
	g.once.Do(func() {
		g.closed.Store(true)
		paths := g.Paths()
		slices.Reverse(paths)
		g.err = removeDirs(paths)
	})
	return g.err
}

// removeDirs kills the processes in the directories (and in any groups
// below them), then removes them, deepest first.
func removeDirs(paths []string) error {
	deadline := time.Now().Add(killTimeout)
	var all []string
	for _, p := range paths {
		sub, err := tree(p)
		if err != nil {
			return err
		}
		all = append(all, sub...)
	}
	if err := killAll(all, deadline); err != nil {
		return err
	}
	var errs []error
	for _, p := range all {
		for {
			err := syscall.Rmdir(p)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			// EBUSY: a killed process has not left yet.
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("cgroup: rmdir %s: %w", p, err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// tree lists the group directory p and the groups below it, deepest
// first; nothing when p does not exist.
func tree(p string) ([]string, error) {
	ents, err := os.ReadDir(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			sub, err := tree(filepath.Join(p, e.Name()))
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		}
	}
	return append(out, p), nil
}

// killAll sends SIGKILL to every process in the groups until none is
// left: a process forked meanwhile is born in the group and killed on the
// next round.
func killAll(dirs []string, deadline time.Time) error {
	for {
		var pids []int
		for _, d := range dirs {
			ps, err := procs(d)
			if err != nil {
				return err
			}
			pids = append(pids, ps...)
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: processes %v still in %v after SIGKILL", pids, dirs)
		}
		for _, pid := range pids {
			if pid == os.Getpid() {
				return fmt.Errorf("cgroup: this process (%d) is in %v: cannot empty it", pid, dirs)
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procs lists the processes in group directory d; none when d is gone.
func procs(d string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Leftovers lists the group directories, at the top of every hierarchy
// this package uses (each cgroup2 mount and the v1 cpu, cpuacct and cpuset
// mounts), whose names start with prefix.
func Leftovers(prefix string) ([]string, error) {
	if prefix == "" || !validName.MatchString(prefix) {
		return nil, fmt.Errorf("%w: prefix %q: want bytes of [A-Za-z0-9_.-]", ErrConfig, prefix)
	}
	h, err := discover()
	if err != nil {
		return nil, err
	}
	var out []string
	var errs []error
	for _, root := range h.all {
		ents, err := os.ReadDir(root)
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup: %w", err))
			continue
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
				out = append(out, filepath.Join(root, e.Name()))
			}
		}
	}
	return out, errors.Join(errs...)
}

// Remove kills the processes in what Leftovers lists for prefix and
// removes those groups, as far as it can. Commands call it on Ctrl-C, and
// tests before they start. NB: it removes whatever matches, so the prefix
// must be one only the caller uses.
func Remove(prefix string) error {
	left, err := Leftovers(prefix)
	return errors.Join(err, removeDirs(left))
}

// Available reports whether New can work here: nil when running as root
// with a cpu controller mounted (v2 or v1); otherwise an error (wrapping
// ErrUnavailable) saying why, for skip messages.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (euid %d): cgroups need root", ErrUnavailable, os.Geteuid())
	}
	h, err := discover()
	if err != nil {
		return err
	}
	if h.v2 == "" && h.cpu == "" {
		return h.unavailable()
	}
	return nil
}

// hierarchies are the cgroup mounts this process sees.
type hierarchies struct {
	v2                   string   // the cgroup2 mount with the cpu controller; "" if none
	v2Cpuset             bool     // whether v2 has the cpuset controller too
	v2Mount              string   // the first cgroup2 mount, for messages
	v2Controllers        string   // its cgroup.controllers, for messages
	cpu, cpuacct, cpuset string   // the v1 mounts of those controllers; "" if none
	all                  []string // every mount above, once: where Leftovers looks
}

func (h hierarchies) unavailable() error {
	if h.v2Mount == "" {
		return fmt.Errorf("%w: no cpu controller: no cgroup2 and no v1 cpu hierarchy mounted", ErrUnavailable)
	}
	return fmt.Errorf("%w: no cpu controller: the unified hierarchy %s lists %q and no v1 cpu hierarchy is mounted",
		ErrUnavailable, h.v2Mount, h.v2Controllers)
}

// discover reads this process's mounts and the controllers of its cgroup2
// mounts.
func discover() (hierarchies, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return hierarchies{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer f.Close()
	ms, err := cpuquota.ParseMountinfo(f)
	if err != nil {
		return hierarchies{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var h hierarchies
	add := func(p string) {
		if !slices.Contains(h.all, p) {
			h.all = append(h.all, p)
		}
	}
	for _, m := range ms {
		if m.V2 {
			b, err := os.ReadFile(filepath.Join(m.Dir, "cgroup.controllers"))
			if err != nil {
				continue
			}
			ctl := strings.Fields(string(b))
			if h.v2Mount == "" {
				h.v2Mount, h.v2Controllers = m.Dir, strings.Join(ctl, " ")
			}
			if h.v2 == "" && slices.Contains(ctl, "cpu") {
				h.v2, h.v2Cpuset = m.Dir, slices.Contains(ctl, "cpuset")
				h.v2Mount, h.v2Controllers = m.Dir, strings.Join(ctl, " ")
			}
			add(m.Dir)
			continue
		}
		for _, c := range []struct {
			name string
			to   *string
		}{{"cpu", &h.cpu}, {"cpuacct", &h.cpuacct}, {"cpuset", &h.cpuset}} {
			if *c.to == "" && slices.Contains(m.Controllers, c.name) {
				*c.to = m.Dir
				add(m.Dir)
			}
		}
	}
	return h, nil
}

// stat reads one key of dir's cpu.stat.
func stat(d, key string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(d, "cpu.stat"))
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cgroup: %s cpu.stat %s %q: %w", d, key, v, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("cgroup: %s cpu.stat has no %s", d, key)
}

// write writes s to the control file d/name in one write(2): the kernel
// reads each write as one whole value.
func write(d, name, s string) error {
	f, err := os.OpenFile(filepath.Join(d, name), os.O_WRONLY|fakeFlags, 0o644)
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup: writing %q to %s: %w", s, filepath.Join(d, name), err)
	}
	return nil
}
