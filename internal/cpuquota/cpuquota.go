// Package cpuquota reads the CPU this process may use: its cgroup's CFS
// quota (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us over
// cpu.cfs_period_us; the least along the path from its group up to the
// hierarchy's root, as the kernel applies them) and the CPUs it may run on
// (Cpus_allowed_list: its cpuset and affinity). A process in a container
// with a CPU limit (Kubernetes resources.limits.cpu), or on a testbed node
// with a quota of its own, then plans with the cores it has rather than
// the machine's.
//
// It reads the files each time it is called, not once at start: a process
// moved into a group after it started sees the group's limit.
package cpuquota

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// ErrParse: a cgroup or proc file does not read as the kernel writes it.
var ErrParse = errors.New("cpuquota: bad file")

// Limit is the CPU a process may use.
type Limit struct {
	// Quota is the CFS quota in cores (quota over period); 0: none.
	Quota float64
	// CPUs is how many CPUs the process may run on; 0: unknown.
	CPUs int
	// Source names the file Quota comes from; "" without a quota.
	Source string
}

// Cores is what the limit leaves, in cores: the least of Quota (when
// set), CPUs (when known) and max, where max > 0 (a --workers flag, the
// machine's CPUs). Zero when nothing bounds it.
func (l Limit) Cores(max float64) float64 {
	c := math.Inf(1)
	if l.Quota > 0 {
		c = l.Quota
	}
	if l.CPUs > 0 {
		c = math.Min(c, float64(l.CPUs))
	}
	if max > 0 {
		c = math.Min(c, max)
	}
	if math.IsInf(c, 1) {
		return 0
	}
	return c
}

// String says the limit in words, for logs: "quota 1.5 cores
// (/sys/fs/cgroup/x/cpu.max), 2 CPUs".
func (l Limit) String() string {
	q := "no quota"
	if l.Quota > 0 {
		q = fmt.Sprintf("quota %s cores (%s)", strconv.FormatFloat(l.Quota, 'f', -1, 64), l.Source)
	}
	if l.CPUs > 0 {
		return fmt.Sprintf("%s, %d CPUs", q, l.CPUs)
	}
	return q
}

// Read reads this process's limit from /proc and its cgroup mounts.
func Read() (Limit, error) { return FS{}.Read() }

// Cores is this process's cores: Read's Limit.Cores(max) with max the
// machine's CPUs (runtime.NumCPU) or, when smaller and positive, workers.
// Where the files cannot be read it is that maximum, and the error says
// why.
func Cores(workers int) (float64, Limit, error) {
	m := float64(runtime.NumCPU())
	if workers > 0 {
		m = math.Min(m, float64(workers))
	}
	l, err := Read()
	if err != nil {
		return m, l, err
	}
	return l.Cores(m), l, nil
}

// FS reads the files under Root instead of "/" (a fake tree, for tests);
// Self is the /proc entry of the process ("self" when empty).
type FS struct {
	Root, Self string
}

func (f FS) path(p string) string {
	if f.Root == "" {
		return p
	}
	return filepath.Join(f.Root, p)
}

// Read reads the limit of the process f names.
func (f FS) Read() (Limit, error) {
	self := f.Self
	if self == "" {
		self = "self"
	}
	var l Limit
	status, err := os.ReadFile(f.path(filepath.Join("/proc", self, "status")))
	if err != nil {
		return l, fmt.Errorf("cpuquota: %w", err)
	}
	if l.CPUs, err = allowedCPUs(string(status)); err != nil {
		return l, err
	}
	cg, err := os.ReadFile(f.path(filepath.Join("/proc", self, "cgroup")))
	if err != nil {
		return l, fmt.Errorf("cpuquota: %w", err)
	}
	mi, err := os.Open(f.path(filepath.Join("/proc", self, "mountinfo")))
	if err != nil {
		return l, fmt.Errorf("cpuquota: %w", err)
	}
	defer mi.Close()
	mounts, err := ParseMountinfo(mi)
	if err != nil {
		return l, err
	}
	groups, err := parseCgroup(string(cg))
	if err != nil {
		return l, err
	}
	dir, v2, ok := cpuDir(groups, mounts)
	if !ok {
		return l, nil // no cpu controller: no quota
	}
	l.Quota, l.Source, err = f.leastQuota(dir.mount, dir.path, v2)
	return l, err
}

// leastQuota walks from the group directory path up to the mount point
// and returns the least quota on the way (0: none) and its file.
func (f FS) leastQuota(mount, path string, v2 bool) (float64, string, error) {
	var least float64
	var source string
	for d := path; ; d = filepath.Dir(d) {
		q, file, err := f.quotaAt(d, v2)
		if err != nil {
			return 0, "", err
		}
		if q > 0 && (least == 0 || q < least) {
			least, source = q, file
		}
		if d == mount || len(d) <= len(mount) || d == "/" || d == "." {
			return least, source, nil
		}
	}
}

// quotaAt reads the quota of the group directory d: 0 when it has none
// (or no such file: a v2 root has no cpu.max).
func (f FS) quotaAt(d string, v2 bool) (float64, string, error) {
	if v2 {
		file := filepath.Join(d, "cpu.max")
		b, err := os.ReadFile(f.path(file))
		if errors.Is(err, os.ErrNotExist) {
			return 0, "", nil
		}
		if err != nil {
			return 0, "", fmt.Errorf("cpuquota: %w", err)
		}
		q, err := ParseMax(string(b))
		return q, file, err
	}
	file := filepath.Join(d, "cpu.cfs_quota_us")
	qb, err := os.ReadFile(f.path(file))
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("cpuquota: %w", err)
	}
	pb, err := os.ReadFile(f.path(filepath.Join(d, "cpu.cfs_period_us")))
	if err != nil {
		return 0, "", fmt.Errorf("cpuquota: %w", err)
	}
	q, err := parseV1(string(qb), string(pb))
	return q, file, err
}

// ParseMax reads a cgroup v2 cpu.max ("150000 100000", or "max 100000"
// for none) as cores; 0 for none.
func ParseMax(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return 0, fmt.Errorf("%w: cpu.max %q: want QUOTA [PERIOD]", ErrParse, s)
	}
	period := "100000" // the kernel's default, when only the quota is given
	if len(f) == 2 {
		period = f[1]
	}
	p, err := strconv.ParseInt(period, 10, 64)
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("%w: cpu.max %q: period %q", ErrParse, s, period)
	}
	if f[0] == "max" {
		return 0, nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || q <= 0 {
		return 0, fmt.Errorf("%w: cpu.max %q: quota %q", ErrParse, s, f[0])
	}
	return float64(q) / float64(p), nil
}

// parseV1 reads cgroup v1's cpu.cfs_quota_us ("-1": none) over
// cpu.cfs_period_us as cores; 0 for none.
func parseV1(quota, period string) (float64, error) {
	q, err := strconv.ParseInt(strings.TrimSpace(quota), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: cpu.cfs_quota_us %q", ErrParse, quota)
	}
	if q < 0 {
		return 0, nil
	}
	p, err := strconv.ParseInt(strings.TrimSpace(period), 10, 64)
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("%w: cpu.cfs_period_us %q", ErrParse, period)
	}
	if q == 0 {
		return 0, fmt.Errorf("%w: cpu.cfs_quota_us 0", ErrParse)
	}
	return float64(q) / float64(p), nil
}

// allowedCPUs counts the CPUs of /proc/PID/status's Cpus_allowed_list
// ("0-3,6"); 0 when the line is absent.
func allowedCPUs(status string) (int, error) {
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "Cpus_allowed_list" {
			continue
		}
		return CountList(strings.TrimSpace(v))
	}
	return 0, nil
}

// maxCPU bounds a CPU number in a list: the kernel's NR_CPUS is at most
// 8192 today.
const maxCPU = 1 << 20

// CountList counts the CPUs of a kernel CPU list ("0-3,6": 5).
func CountList(s string) (int, error) {
	n := 0
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a > maxCPU {
			return 0, fmt.Errorf("%w: CPU list %q: %q", ErrParse, s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b > maxCPU {
				return 0, fmt.Errorf("%w: CPU list %q: %q", ErrParse, s, part)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

// group is one line of /proc/PID/cgroup: the controllers of a hierarchy
// (none for v2) and the process's group in it.
type group struct {
	controllers []string
	v2          bool
	path        string
}

// parseCgroup reads /proc/PID/cgroup ("4:cpu,cpuacct:/a/b", "0::/a").
func parseCgroup(s string) ([]group, error) {
	var out []group
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		id, rest, ok := strings.Cut(line, ":")
		ctl, path, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 || !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("%w: /proc/PID/cgroup line %q", ErrParse, line)
		}
		g := group{path: path, v2: id == "0" && ctl == ""}
		if ctl != "" {
			g.controllers = strings.Split(ctl, ",")
		}
		out = append(out, g)
	}
	return out, nil
}

// Mount is one cgroup mount of mountinfo: its root in the hierarchy and
// where it is mounted.
type Mount struct {
	Root, Dir   string
	V2          bool
	Controllers []string // v1: the super options, which name its controllers
}

// ParseMountinfo reads the cgroup and cgroup2 mounts of a
// /proc/PID/mountinfo, in order (the testbed's cgroups find their
// hierarchies with it too).
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// 32 31 0:29 /root /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 5 || len(f) < sep+4 {
			continue
		}
		switch f[sep+1] {
		case "cgroup2":
			out = append(out, Mount{Root: unescape(f[3]), Dir: unescape(f[4]), V2: true})
		case "cgroup":
			out = append(out, Mount{Root: unescape(f[3]), Dir: unescape(f[4]), Controllers: strings.Split(f[sep+3], ",")})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: mountinfo: %w", ErrParse, err)
	}
	return out, nil
}

// groupDir is a group's directory and the mount point above it.
type groupDir struct{ mount, path string }

// cpuDir finds the directory of this process's group in the hierarchy
// with the cpu controller: v1's cpu hierarchy when mounted (a machine may
// mount both, with cpu on v1 only), else the unified one. ok is false
// when neither is.
func cpuDir(groups []group, mounts []Mount) (d groupDir, v2, ok bool) {
	for _, g := range groups {
		if !slices.Contains(g.controllers, "cpu") {
			continue
		}
		for _, m := range mounts {
			if !m.V2 && slices.Contains(m.Controllers, "cpu") {
				if p, ok := under(m, g.path); ok {
					return groupDir{m.Dir, p}, false, true
				}
			}
		}
	}
	for _, g := range groups {
		if !g.v2 {
			continue
		}
		for _, m := range mounts {
			if m.V2 {
				if p, ok := under(m, g.path); ok {
					return groupDir{m.Dir, p}, true, true
				}
			}
		}
	}
	return groupDir{}, false, false
}

// under is the directory of group path below mount m: the mount shows
// the hierarchy from m.Root down, so path must be at or below it.
func under(m Mount, path string) (string, bool) {
	rel, err := filepath.Rel(m.Root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return filepath.Join(m.Dir, rel), true
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
