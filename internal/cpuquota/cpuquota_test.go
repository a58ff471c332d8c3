package cpuquota

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeRoot writes files (path relative to the root: content) under a
// fresh directory and returns it.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const v1Mountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

// TestReadV1: a testbed node's group on a v1 cpu hierarchy (this
// machine's layout) gives its quota, and the allowed CPUs bound it.
func TestReadV1(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/status":                              "Name:\tcompute-agent\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n",
		"proc/self/cgroup":                              "3:cpuset:/sph-1-cp1\n2:cpuacct:/sph-1-cp1\n1:cpu:/sph-1-cp1\n0::/\n",
		"proc/self/mountinfo":                           v1Mountinfo,
		"sys/fs/cgroup/cpu/cpu.cfs_quota_us":            "-1\n",
		"sys/fs/cgroup/cpu/cpu.cfs_period_us":           "100000\n",
		"sys/fs/cgroup/cpu/sph-1-cp1/cpu.cfs_quota_us":  "150000\n",
		"sys/fs/cgroup/cpu/sph-1-cp1/cpu.cfs_period_us": "100000\n",
	})
	l, err := FS{Root: root}.Read()
	if err != nil {
		t.Fatal(err)
	}
	if l.Quota != 1.5 || l.CPUs != 2 || l.Source != "/sys/fs/cgroup/cpu/sph-1-cp1/cpu.cfs_quota_us" {
		t.Fatalf("limit %+v: want quota 1.5 from the node's group, 2 CPUs", l)
	}
	for _, tc := range []struct{ max, want float64 }{{0, 1.5}, {8, 1.5}, {1, 1}} {
		if got := l.Cores(tc.max); got != tc.want {
			t.Errorf("Cores(%g) = %g, want %g", tc.max, got, tc.want)
		}
	}
}

// TestReadV2Nested: on the unified hierarchy the least quota on the way
// up counts (a container's limit on a parent group), and a mount whose
// root is the container's group (no cgroup namespace) is resolved.
func TestReadV2Nested(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/status":                   "Cpus_allowed_list:\t0-7\n",
		"proc/self/cgroup":                   "0::/kubepods/pod1/ctr\n",
		"proc/self/mountinfo":                "25 20 0:22 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		"sys/fs/cgroup/cpu.max":              "250000 100000\n",
		"sys/fs/cgroup/pod1/cpu.max":         "max 100000\n",
		"sys/fs/cgroup/pod1/ctr/cpu.max":     "300000 100000\n",
		"sys/fs/cgroup/pod1/ctr/cpu.weight":  "100\n",
		"sys/fs/cgroup/pod1/other/cpu.max":   "10000 100000\n",
		"sys/fs/cgroup/unrelated/cpu.weight": "100\n",
	})
	l, err := FS{Root: root}.Read()
	if err != nil {
		t.Fatal(err)
	}
	if l.Quota != 2.5 || l.CPUs != 8 || l.Source != "/sys/fs/cgroup/cpu.max" {
		t.Fatalf("limit %+v: want the parent's 2.5 cores (less than the group's own 3), 8 CPUs", l)
	}
	if got := l.Cores(4); got != 2.5 {
		t.Fatalf("Cores(4) = %g, want 2.5", got)
	}
}

// TestReadNoQuota: without a quota the cores are the allowed CPUs.
func TestReadNoQuota(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/status":    "Cpus_allowed_list:\t0,2-3\n",
		"proc/self/cgroup":    "0::/\n",
		"proc/self/mountinfo": "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
	})
	l, err := FS{Root: root}.Read()
	if err != nil {
		t.Fatal(err)
	}
	if l.Quota != 0 || l.CPUs != 3 || l.Cores(0) != 3 || l.Cores(2) != 2 {
		t.Fatalf("limit %+v, cores %g: want no quota and 3 CPUs", l, l.Cores(0))
	}
	if !strings.Contains(l.String(), "no quota, 3 CPUs") {
		t.Fatalf("String() = %q", l.String())
	}
}

// TestReadBadFiles: a file that does not read as the kernel writes it is
// an error that names it.
func TestReadBadFiles(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"proc/self/status":        "Cpus_allowed_list:\t0-1\n",
		"proc/self/cgroup":        "0::/g\n",
		"proc/self/mountinfo":     "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		"sys/fs/cgroup/g/cpu.max": "lots 100000\n",
	})
	_, err := FS{Root: root}.Read()
	if !errors.Is(err, ErrParse) || !strings.Contains(err.Error(), "cpu.max") {
		t.Fatalf("err %v: want ErrParse naming cpu.max", err)
	}
	if _, err := CountList("3-1"); !errors.Is(err, ErrParse) {
		t.Fatalf("CountList(3-1): err %v, want ErrParse", err)
	}
}

// TestReadThisProcess: the real files of this process read without error
// and give at least a fraction of a core.
func TestReadThisProcess(t *testing.T) {
	c, l, err := Cores(0)
	if err != nil {
		t.Fatal(err)
	}
	if c <= 0 || (l.CPUs > 0 && c > float64(l.CPUs)) {
		t.Fatalf("cores %g from %v", c, l)
	}
}

// FuzzParseCgroupFiles: the parsers of the proc and cgroup files never
// panic, and a parsed quota is positive or none.
func FuzzParseCgroupFiles(f *testing.F) {
	f.Add("150000 100000", "0::/a\n1:cpu,cpuacct:/b", "0-3,6")
	f.Add("max", "", "")
	f.Fuzz(func(t *testing.T, max, cg, list string) {
		if q, err := ParseMax(max); err == nil && q < 0 {
			t.Fatalf("ParseMax(%q) = %g", max, q)
		}
		_, _ = parseCgroup(cg)
		_, _ = ParseMountinfo(strings.NewReader(cg))
		if n, err := CountList(list); err == nil && n < 0 {
			t.Fatalf("CountList(%q) = %d", list, n)
		}
	})
}

func TestParseMountinfo(t *testing.T) {
	const text = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 /kubepods /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/my\040unified rw,relatime shared:1 master:2 - cgroup2 cgroup2 rw,nsdelegate
short line
`
	got, err := ParseMountinfo(strings.NewReader(text))
	want := []Mount{
		{Root: "/", Dir: "/sys/fs/cgroup/cpu,cpuacct", Controllers: []string{"rw", "cpu", "cpuacct"}},
		{Root: "/kubepods", Dir: "/sys/fs/cgroup/cpuset", Controllers: []string{"rw", "cpuset"}},
		{Root: "/", Dir: "/sys/fs/cgroup/systemd", Controllers: []string{"rw", "xattr", "name=systemd"}},
		{Root: "/", Dir: "/sys/fs/cgroup/my unified", V2: true},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMountinfo = %+v, %v, want %+v", got, err, want)
	}
}
