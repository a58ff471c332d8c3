package netns

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"
)

// TestCongestion (root): a node namespace's congestion control is its
// own: set to reno in both nodes (the testbed's --cc), read back, while
// the host's stays; a name the kernel does not offer fails naming the
// ones it does, and one that is no name fails before the kernel.
func TestCongestion(t *testing.T) {
	if err := CheckCongestion("cubic; reboot"); !errors.Is(err, ErrCongestion) {
		t.Errorf("CheckCongestion of a bad name: %v", err)
	}
	if err := Available(); err != nil {
		testutil.Require(t, "two-namespace emulation unavailable: %v", err)
	}
	avail, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil || !strings.Contains(string(avail), "reno") {
		t.Skipf("reno is not available here (%q, %v)", avail, err)
	}
	host, err := os.ReadFile(ccFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topo, err := NewLink(ctx, Config{Prefix: ProcessPrefix() + "cc"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := topo.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	for _, n := range topo.Nodes() {
		if got, err := n.Congestion(); err != nil || got != strings.TrimSpace(string(host)) {
			t.Errorf("%s before: %q, %v; want the host's %q", n.NS, got, err, strings.TrimSpace(string(host)))
		}
		if err := n.SetCongestion("reno"); err != nil {
			t.Fatal(err)
		}
		if got, err := n.Congestion(); err != nil || got != "reno" {
			t.Errorf("%s: %q, %v; want reno", n.NS, got, err)
		}
	}
	if now, _ := os.ReadFile(ccFile); string(now) != string(host) {
		t.Errorf("the host's congestion control changed: %q, was %q", now, host)
	}
	if err := topo.Storage[0].SetCongestion("nosuchcc"); !errors.Is(err, ErrCongestion) || !strings.Contains(err.Error(), "available") {
		t.Errorf("an algorithm the kernel lacks: %v, want ErrCongestion naming the available ones", err)
	}
}
