package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// TestMain removes this process's namespaces on Ctrl-C and checks, after
// the tests, that none is left. Started with helperEnv set, the binary is
// a bulk-transfer helper instead (wan_test.go).
func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helperMain(strings.Fields(h)))
	}
	stop := RemoveOnSignal(ProcessPrefix())
	code := m.Run()
	stop()
	if Available() == nil {
		if left, err := Leftovers(ProcessPrefix()); err != nil || len(left) > 0 {
			fmt.Fprintf(os.Stderr, "netns: left behind: %v (%v)\n", left, err)
			Remove(ProcessPrefix())
			code = 1
		}
	}
	os.Exit(code)
}

func TestConfigRejects(t *testing.T) {
	for _, c := range []Config{
		{Prefix: "much-too-long-prefix"},
		{Prefix: "bad/name"},
		{Subnet: "10.0.0.0/31"},
		{Subnet: "fd00::/64"},
		{Subnet: "nonsense"},
		{Burst: -1},
	} {
		if _, err := Setup(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("Setup(%+v) = %v, want ErrConfig", c, err)
		}
	}
}

func TestParseNetDev(t *testing.T) {
	const text = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
sph-1-2s: 1048800     800    0    0    0     0          0         0  2097600    1600    0    0    0     0       0          0
`
	got, err := parseNetDev([]byte(text), "sph-1-2s")
	want := DevCounters{RxBytes: 1048800, RxPackets: 800, TxBytes: 2097600, TxPackets: 1600}
	if err != nil || got != want {
		t.Errorf("parseNetDev = %+v, %v, want %+v", got, err, want)
	}
	if _, err := parseNetDev([]byte(text), "eth9"); err == nil {
		t.Error("parseNetDev found a missing interface")
	}
}

// setup makes a pair for the test and closes it when the test ends.
func setup(t *testing.T, cfg Config) *Pair {
	t.Helper()
	if err := Available(); err != nil {
		testutil.Require(t, "two-namespace emulation unavailable: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := Setup(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// checkGone fails the test when anything named with prefix is left.
func checkGone(t *testing.T, prefix string) {
	t.Helper()
	left, err := Leftovers(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestNetnsNoLeftovers sets up a shaped pair over a stale namespace of the
// same name, moves 1 MiB each way over TCP across it, checks the veth
// counters saw the bytes, closes the pair and checks nothing is left.
func TestNetnsNoLeftovers(t *testing.T) {
	if err := Available(); err != nil {
		testutil.Require(t, "two-namespace emulation unavailable: %v", err)
	}
	prefix := ProcessPrefix() + "a"
	// A stale namespace from a killed run.
	if err := run(context.Background(), "ip", "netns", "add", prefix+"-s"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(prefix) })
	p := setup(t, Config{Prefix: prefix, Rate: shape.MustParseRate("400mbit")})
	if p.StorageIP == p.ComputeIP || !strings.HasPrefix(p.StorageIP, "10.213.") || p.Rate.Bits() != 400e6 {
		t.Errorf("pair %+v", p)
	}

	before, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := p.Listen(true, "tcp", p.StorageIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	const size = 1 << 20
	msg := make([]byte, size)
	rand.Read(msg)
	echoed := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		echoed <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := p.Dial(ctx, false, "tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c.Write(msg)
		c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo across the pair: %d bytes, %v; want %d intact", len(got), err, size)
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
	after, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	t.Logf("counters: %+v", d)
	for name, v := range map[string]uint64{
		"storage rx": d.Storage.RxBytes, "storage tx": d.Storage.TxBytes,
		"compute rx": d.Compute.RxBytes, "compute tx": d.Compute.TxBytes,
	} {
		if v < size || v > size*11/10 {
			t.Errorf("%s = %d bytes, want 1 MiB plus headers", name, v)
		}
	}
	if d.Storage.TxBytes != d.Compute.RxBytes || d.Storage.RxBytes != d.Compute.TxBytes {
		t.Errorf("the two ends disagree: %+v", d)
	}
	if out, err := exec.Command("tc", "-n", p.StorageNS, "qdisc", "show", "dev", p.StorageDev).CombinedOutput(); err != nil || !strings.Contains(string(out), "tbf") || !strings.Contains(string(out), "400Mbit") {
		t.Errorf("storage end qdisc: %s %v", out, err)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := p.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters after Close = %v, want ErrClosed", err)
	}
	checkGone(t, prefix)
}

// TestCloseKillsCommands starts a shell with a child in each namespace,
// closes the pair while they run, and checks they died and nothing is
// left; a command whose context ends is killed with its group too.
func TestCloseKillsCommands(t *testing.T) {
	p := setup(t, Config{Prefix: ProcessPrefix() + "k"})
	var cmds []*exec.Cmd
	waits := make([]chan error, 0, 2)
	for _, storage := range []bool{true, false} {
		cmd := p.Command(context.Background(), storage, "sh", "-c", "sleep 60 & sleep 60; wait")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w := make(chan error, 1)
		go func() { w <- cmd.Wait() }()
		cmds, waits = append(cmds, cmd), append(waits, w)
	}
	// Wait until the children exist, so the group kill is what ends them.
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := output(context.Background(), "ip", "netns", "pids", p.StorageNS)
		if len(strings.Fields(out)) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, w := range waits {
		select {
		case err := <-w:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("command %d ended with %v, want SIGKILL", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("command %d still running 5 s after Close", i)
		}
		// The group (the background sleep) is gone too, once init has
		// reaped the orphan.
		gone := time.Now().Add(5 * time.Second)
		for syscall.Kill(-cmds[i].Process.Pid, 0) == nil && time.Now().Before(gone) {
			time.Sleep(10 * time.Millisecond)
		}
		if err := syscall.Kill(-cmds[i].Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group of command %d still exists 5 s after Close: %v", i, err)
		}
	}
	checkGone(t, ProcessPrefix()+"k")

	// A cancelled context kills the group of a command on a live pair.
	q := setup(t, Config{Prefix: ProcessPrefix() + "x"})
	ctx, cancel := context.WithCancel(context.Background())
	cmd := q.Command(ctx, false, "sh", "-c", "sleep 60 & sleep 60; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("command still running 5 s after its context ended")
	}
	time.Sleep(20 * time.Millisecond)
	if out, _ := output(context.Background(), "ip", "netns", "pids", q.ComputeNS); strings.TrimSpace(out) != "" {
		t.Errorf("processes left in %s: %s", q.ComputeNS, out)
	}
}

// TestPayloadFraction: full TCP segments of MTU-52 payload bytes (IPv4,
// TCP and its timestamps) cost MTU bytes of a TUN device's rate and MTU+14
// of a veth's; an MTU with no room for payload has none.
func TestPayloadFraction(t *testing.T) {
	for _, c := range []struct {
		mtu      int
		ethernet bool
		want     float64
	}{{1500, true, 1448.0 / 1514}, {1500, false, 1448.0 / 1500}, {9000, true, 8948.0 / 9014}, {52, false, 0}, {0, true, 0}} {
		if got := PayloadFraction(c.mtu, c.ethernet); got != c.want {
			t.Errorf("PayloadFraction(%d, %v) = %v, want %v", c.mtu, c.ethernet, got, c.want)
		}
	}
}
