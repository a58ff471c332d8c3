package bed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/cpuquota"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/testbed/cgroup"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// helperListen, as the test binary's first argument, makes it a server:
// it listens on the address after it until SIGTERM.
const helperListen = "bed-helper-listen"

// helperQuota, as the test binary's only argument, makes it print the
// cores it may use (cpuquota.Cores, as the compute agent reads them) and
// the limit they come from.
const helperQuota = "bed-helper-quota"

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == helperListen {
		// SIGTERM handled before the address answers: the test may stop
		// the server as soon as it is ready.
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() { <-term; os.Exit(0) }() // a clean exit, as the agents'
		lis, err := net.Listen("tcp", os.Args[2])
		if err != nil {
			println(err.Error())
			os.Exit(2)
		}
		println("listening on", lis.Addr().String())
		for {
			c, err := lis.Accept()
			if err != nil {
				os.Exit(0)
			}
			c.Close()
		}
	}
	if len(os.Args) == 2 && os.Args[1] == helperQuota {
		c, l, err := cpuquota.Cores(0)
		if err != nil {
			println(err.Error())
			os.Exit(2)
		}
		fmt.Printf("%g %s\n", c, l)
		os.Exit(0)
	}
	code := m.Run()
	// Whatever a failed test left is removed, and fails the run.
	if left := RemoveLeftovers(); len(left) > 0 {
		println("leftover namespaces, links or cgroups:", strings.Join(left, ", "))
		code = 1
	}
	os.Exit(code)
}

func TestSeries(t *testing.T) {
	var s Series
	t0 := time.Unix(100, 0)
	s.Add(t0, Counts{RX: []int64{1000}, RXPackets: []int64{10}})
	s.Add(t0.Add(10*time.Millisecond), Counts{RX: []int64{2000}, RXPackets: []int64{20}})
	s.Add(t0.Add(20*time.Millisecond), Counts{RX: []int64{2000}, RXPackets: []int64{20}})
	if c := s.During(t0.Add(5*time.Millisecond).UnixNano(), t0.Add(30*time.Millisecond).UnixNano()); c.RX[0] != 500 || c.RXPackets[0] != 5 {
		t.Errorf("during: %+v, want 500 bytes, 5 packets (interpolated, clamped)", c)
	}
	if c := s.During(t0.Add(-time.Second).UnixNano(), t0.UnixNano()); c.RX[0] != 0 {
		t.Errorf("before the first sample: %+v", c)
	}
	// Blur: what the samples around a time leave open, none at a sample
	// or outside the series.
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{{5 * time.Millisecond, 1000}, {15 * time.Millisecond, 0}, {10 * time.Millisecond, 0}, {-time.Second, 0}, {time.Second, 0}} {
		if b := s.Blur(t0.Add(tc.at).UnixNano()); b[0] != tc.want {
			t.Errorf("blur at %v: %v bytes, want %v", tc.at, b[0], tc.want)
		}
	}
}

// TestPinCores: each storage agent on cores of its own, as many as its
// quota rounded up, and the compute agents on the rest, when that leaves
// them 3.
func TestPinCores(t *testing.T) {
	for _, tc := range []struct {
		cores, storage, per int
		want                string // storage cpusets | compute cpuset
		why                 string
	}{
		{8, 1, 1, "0|1-7", "storage agent on core 0, compute agent on cores 1-7"},
		{4, 1, 1, "0|1-3", "storage agent on core 0, compute agent on cores 1-3"},
		{3, 1, 1, "|", "not pinned: 3 cores are too few to split (the storage and compute agents share them by their quotas)"},
		{8, 2, 1, "0,1|2-7", "storage agents on cores 0, 1 (one each), compute agents on cores 2-7"},
		{5, 2, 1, "0,1|2-4", "storage agents on cores 0, 1 (one each), compute agents on cores 2-4"},
		{4, 2, 1, "|", "not pinned: 4 cores are too few to give each of 2 storage agents one and the compute agents 3 (the agents share them by their quotas)"},
		// --storage-cpus 4 on 16 cores: four cores, not one.
		{16, 1, 4, "0-3|4-15", "storage agent on cores 0-3, compute agent on cores 4-15"},
		{16, 2, 2, "0-1,2-3|4-15", "storage agents on cores 0-1, 2-3 (2 cores each), compute agents on cores 4-15"},
		{6, 1, 4, "|", "not pinned: 6 cores are too few to split (the storage and compute agents share them by their quotas)"},
		{8, 2, 3, "|", "not pinned: 8 cores are too few to give each of 2 storage agents 3 cores and the compute agents 3 (the agents share them by their quotas)"},
	} {
		p := PinCores(tc.cores, tc.storage, tc.per)
		var set []string
		for i := range tc.storage {
			set = append(set, p.StorageCores(i))
		}
		got := strings.Trim(strings.Join(set, ","), ",") + "|" + p.Compute
		if got != tc.want || p.Why != tc.why {
			t.Errorf("%d cores, %d storage agents of %d: got %q (%s), want %q (%s)", tc.cores, tc.storage, tc.per, got, p.Why, tc.want, tc.why)
		}
	}
}

func rates(rs ...string) []shape.Rate {
	var out []shape.Rate
	for _, r := range rs {
		out = append(out, shape.MustParseRate(r))
	}
	return out
}

// TestNewRejects: a bed needs a storage link and at least one compute
// node.
func TestNewRejects(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no links":                      {},
		"negative compute":              {Links: rates("1gbit"), ComputeNodes: -1},
		"compute links on loopback":     {Links: rates("1gbit"), ComputeNodes: 2, ComputeLinks: rates("1gbit", "1gbit")},
		"compute links for fewer nodes": {Netns: true, Links: rates("1gbit"), ComputeNodes: 2, ComputeLinks: rates("1gbit")},
	} {
		if b, err := New(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			if b != nil {
				b.Close()
			}
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// TestLoopbackFront: on loopback each storage node's server sits behind
// a shaping proxy of its own; what the compute side received is the
// proxies' relayed bytes, and with several nodes each storage link's
// bytes and each storage agent's CPU are read too.
func TestLoopbackFront(t *testing.T) {
	ctx := context.Background()
	b, err := New(ctx, Config{Label: "test", Links: rates("1gbit", "1gbit")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Netns() || b.Topology() != nil || b.StorageNodes() != 2 || b.ComputeNodes() != 1 || b.Label() != "test" {
		t.Fatalf("loopback bed: netns %v, %d x %d nodes, label %q", b.Netns(), b.StorageNodes(), b.ComputeNodes(), b.Label())
	}
	if h := b.StorageHosts(); !slices.Equal(h, []string{"127.0.0.1", "127.0.0.1"}) {
		t.Errorf("storage hosts %v", h)
	}
	listen, err := b.ListenAddr(0, "7070")
	if err != nil || strings.HasSuffix(listen, ":7070") || !strings.HasPrefix(listen, "127.0.0.1:") {
		t.Fatalf("loopback listen address %q, %v: want a free port of 127.0.0.1", listen, err)
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	const n = 100_000
	served := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err == nil {
			_, err = c.Write(make([]byte, n))
			c.Close()
		}
		served <- err
	}()
	addr, err := b.Front(0, listen)
	if err != nil || addr == listen {
		t.Fatalf("front: %q, %v: want a proxy's address", addr, err)
	}
	burn(t, 50*time.Millisecond)
	b.SetStorageAgent(1, os.Getpid())
	c, err := b.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.Copy(io.Discard, c)
	c.Close()
	if err != nil || got != n {
		t.Fatalf("read %d bytes through the proxy, %v; want %d", got, err, n)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil { // ends the proxies: their counts are final
		t.Fatal(err)
	}
	cs, err := b.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cs.RX, []int64{n}) || !slices.Equal(cs.Links, []int64{n, 0}) || len(cs.CPU) != 2 || cs.CPU[0] != 0 || cs.CPU[1] <= 0 {
		t.Errorf("counters %+v: want rx [%d], links [%d 0], cpu [0 >0] (node 1's agent is this process)", cs, n, n)
	}
}

// TestStartServer: a server on a node is ready once its address answers,
// Close stops it, and a server that exits first is an ErrExited error
// quoting its log's last line.
func TestStartServer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := New(ctx, Config{Links: rates("1gbit")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	listen, err := b.ListenAddr(0, "7070")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := b.StartServer(ctx, StorageHost(0), filepath.Join(dir, "srv.log"), listen, os.Args[0], helperListen, listen)
	if err != nil {
		t.Fatal(err)
	}
	pid := srv.Pid()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("server %d not running: %v", pid, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Stop after Close: the same result, and the process is gone (reaped).
	if err := srv.Stop(); err != nil {
		t.Errorf("server stopped by SIGTERM: %v, want a clean exit", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server %d after Close: %v, want ESRCH", pid, err)
	}

	b2, err := New(ctx, Config{Links: rates("1gbit")})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	logPath := filepath.Join(dir, "boom.log")
	notReady := func(context.Context) error { return errors.New("not yet") }
	_, err = b2.StartDaemon(ctx, ComputeHost(0), logPath, "ready", notReady, "sh", "-c", "echo starting; echo boom 42; exit 3")
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), ": boom 42") || !strings.Contains(err.Error(), logPath) {
		t.Errorf("a server that exits: %v, want ErrExited with its log and last line", err)
	}
	if got := Tail(logPath); got != ": boom 42" {
		t.Errorf("tail %q", got)
	}
	if got := Tail(filepath.Join(dir, "missing.log")); got != "" {
		t.Errorf("tail of a missing log %q", got)
	}
}

// burn spins until the kernel counts at least d of this process's CPU.
func burn(t *testing.T, d time.Duration) {
	t.Helper()
	var ru syscall.Rusage
	for x := 0; ; x++ {
		if x%1_000_000 == 0 {
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
				t.Fatal(err)
			}
			if time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) >= d {
				return
			}
		}
	}
}

// TestProcCPU: a process's CPU time as /proc says, which follows the
// kernel's own account of it; 0 for a process that does not exist.
func TestProcCPU(t *testing.T) {
	burn(t, 50*time.Millisecond)
	if got := ProcCPU(os.Getpid()); got < 30*time.Millisecond {
		t.Errorf("this process's CPU %v, want at least 30 ms of the 50 ms rusage counted", got)
	}
	if got := ProcCPU(1 << 30); got != 0 {
		t.Errorf("CPU of no process: %v", got)
	}
}

// TestNetnsBed (root): two storage nodes and a compute node in
// namespaces, each node's address its own; a storage node's processes
// join its cgroup; the kernel's counters see what a storage node sent
// and the compute node received; Close leaves nothing (TestMain checks).
func TestNetnsBed(t *testing.T) {
	if err := netns.Available(); err != nil {
		testutil.Require(t, "namespaces unavailable (%v); CI runs this as root", err)
	}
	ctx := context.Background()
	b, err := New(ctx, Config{Netns: true, Links: rates("1gbit", "1gbit")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	hosts := b.StorageHosts()
	if !b.Netns() || len(hosts) != 2 || hosts[0] == hosts[1] || hosts[0] == "127.0.0.1" {
		t.Fatalf("netns bed: netns %v, storage hosts %v", b.Netns(), hosts)
	}
	listen, err := b.ListenAddr(0, "7070")
	if err != nil || listen != net.JoinHostPort(hosts[0], "7070") {
		t.Fatalf("listen address %q, %v", listen, err)
	}
	if addr, err := b.Front(0, listen); err != nil || addr != listen {
		t.Errorf("front in netns mode: %q, %v: want the target itself", addr, err)
	}
	if cgroup.Available() == nil {
		if err := b.MakeGroups(0.5, Pins{}, 1); err != nil {
			t.Fatal(err)
		}
		if b.StorageGroup(0) == nil || b.StorageGroup(1) == nil || b.ComputeGroup() == nil || b.ComputeQuota() != 1 {
			t.Fatalf("groups: storage %v %v, compute %v (quota %g): want one per storage node and the compute nodes' of 1 core",
				b.StorageGroup(0), b.StorageGroup(1), b.ComputeGroup(), b.ComputeQuota())
		}
		cmd := b.Command(ctx, StorageHost(1), "sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		if err := b.Place(StorageHost(1), cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		procs, err := os.ReadFile(filepath.Join(b.StorageGroup(1).Paths()[0], "cgroup.procs"))
		if err != nil || !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(cmd.Process.Pid)) {
			t.Errorf("storage node 1's cgroup holds %q (%v), want pid %d", procs, err, cmd.Process.Pid)
		}
	}
	lis, err := b.Topology().Storage[0].Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	const n = 1 << 20
	served := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err == nil {
			_, err = c.Write(make([]byte, n))
			c.Close()
		}
		served <- err
	}()
	before, err := b.Counters()
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.Dial(ctx, listen)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.Copy(io.Discard, c)
	c.Close()
	if err != nil || got != n {
		t.Fatalf("read %d bytes over the link, %v; want %d", got, err, n)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	after, err := b.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if len(after.RX) != 1 || len(after.Links) != 2 || len(after.CPU) != 2 {
		t.Fatalf("counters %+v: want one compute node's, two storage links'", after)
	}
	if rx, sent := after.RX[0]-before.RX[0], after.Links[0]-before.Links[0]; rx < n || sent < n || after.Links[1]-before.Links[1] >= n {
		t.Errorf("compute node received %d, storage node 0 sent %d, node 1 %d: want at least %d on node 0's link only", rx, sent, after.Links[1]-before.Links[1], n)
	}
}

// TestComputeCPUs: the compute nodes get the cores the storage nodes'
// quotas leave, and no more than the cores pinned to them; a cell that
// leaves them less than MinComputeCPUs is refused. Pinning is PinCores'
// (as the experiment pins: each storage agent on its quota rounded up).
func TestComputeCPUs(t *testing.T) {
	for _, tc := range []struct {
		cores, storage int
		cpus           float64
		pinned         bool
		want           float64 // 0: refused
	}{
		{2, 1, 0.5, false, 1.5},
		{2, 1, 1, false, 1},
		{2, 2, 0.5, false, 1},
		{2, 1, 1.5, false, 0.5},
		{2, 1, 1.75, false, 0},
		{2, 2, 1, false, 0},
		// Pinned: a storage node's idle half core is not the compute
		// nodes'.
		{4, 1, 0.5, true, 3},
		{4, 1, 1, true, 3},
		{4, 2, 1, false, 2},
		{8, 1, 0.5, true, 7},
		{8, 2, 1, true, 6},
		{8, 1, 2, true, 6},
	} {
		pins := PinCores(tc.cores, tc.storage, int(math.Ceil(tc.cpus)))
		got, err := ComputeCPUs(float64(tc.cores), tc.storage, tc.cpus, pins, 1)
		if (pins.Compute != "") != tc.pinned {
			t.Errorf("%d cores, %d x %g: pins %+v, want pinned %v", tc.cores, tc.storage, tc.cpus, pins, tc.pinned)
		}
		if tc.want == 0 {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "lower --storage-cpus") {
				t.Errorf("%d cores, %d x %g: %g, %v: want ErrConfig saying what to change", tc.cores, tc.storage, tc.cpus, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%d cores, %d x %g: %g, %v; want %g", tc.cores, tc.storage, tc.cpus, got, err, tc.want)
		}
	}
	// Split into groups of their own (independent jobs), each part must
	// be at least MinComputeCPUs.
	for _, tc := range []struct {
		cpus  float64
		apart int
		want  float64 // 0: refused
	}{{1, 2, 1}, {0.5, 3, 1.5}, {1.25, 2, 0}, {0.5, 4, 0}} {
		got, err := ComputeCPUs(2, 1, tc.cpus, Pins{}, tc.apart)
		if tc.want == 0 {
			if !errors.Is(err, ErrConfig) {
				t.Errorf("2 cores, 1 x %g, %d apart: %g, %v: want ErrConfig", tc.cpus, tc.apart, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("2 cores, 1 x %g, %d apart: %g, %v; want %g", tc.cpus, tc.apart, got, err, tc.want)
		}
	}
}

// TestNodesSeeTheirQuota (root): a program started on a node is born in
// its cgroup and reads that node's quota as the compute agent does
// (cpuquota.Cores): the compute node's 1.5 cores, the storage node's 0.5.
// Close removes the groups (TestMain checks).
func TestNodesSeeTheirQuota(t *testing.T) {
	if err := netns.Available(); err != nil {
		testutil.Require(t, "namespaces unavailable (%v); CI runs this as root", err)
	}
	if err := cgroup.Available(); err != nil {
		testutil.Require(t, "cgroups unavailable (%v); CI runs this as root", err)
	}
	ctx := context.Background()
	b, err := New(ctx, Config{Netns: true, Links: rates("1gbit")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.MakeGroups(0.5, Pins{}, 1.5); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		h    Host
		want string
	}{{ComputeHost(0), "1.5"}, {StorageHost(0), "0.5"}} {
		out, err := b.Command(ctx, tc.h, os.Args[0], helperQuota).CombinedOutput()
		if err != nil {
			t.Fatalf("%+v: %v: %s", tc.h, err, out)
		}
		if f := strings.Fields(string(out)); len(f) == 0 || f[0] != tc.want {
			t.Errorf("%+v reads %q: want %s cores", tc.h, out, tc.want)
		}
	}

	// Independent jobs (ComputeApart): each compute node its own group
	// with its part of the quota.
	b2, err := New(ctx, Config{Netns: true, Links: rates("1gbit"), ComputeNodes: 2, ComputeApart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := b2.MakeGroups(0.5, Pins{}, 1.5); err != nil {
		t.Fatal(err)
	}
	if b2.ComputeQuota() != 1.5 || b2.ComputeNodeQuota() != 0.75 || b2.group(ComputeHost(0)) == b2.group(ComputeHost(1)) {
		t.Errorf("apart: quota %g, per node %g, groups %v and %v: want 1.5, 0.75 and two groups",
			b2.ComputeQuota(), b2.ComputeNodeQuota(), b2.group(ComputeHost(0)), b2.group(ComputeHost(1)))
	}
	for _, h := range []Host{ComputeHost(0), ComputeHost(1)} {
		out, err := b2.Command(ctx, h, os.Args[0], helperQuota).CombinedOutput()
		if err != nil {
			t.Fatalf("%+v: %v: %s", h, err, out)
		}
		if f := strings.Fields(string(out)); len(f) == 0 || f[0] != "0.75" {
			t.Errorf("apart: %+v reads %q: want 0.75 cores", h, out)
		}
	}
}
