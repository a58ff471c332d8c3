package storageagent

import (
	"bytes"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

// accept returns the server side of one loopback connection accepted
// through a connListener of size bytes, and what it logged.
func accept(t *testing.T, size int, force bool) (*net.TCPConn, string) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	lis := &connListener{Listener: inner, size: size, force: force, log: zerolog.New(&log)}
	t.Cleanup(func() { lis.Close() })
	client, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn), log.String()
}

// kernelSendBuffer is c's SO_SNDBUF as the kernel reports it.
func kernelSendBuffer(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var gerr error
	if err := raw.Control(func(fd uintptr) { n, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return n
}

// TestSendBufferSet: a size net.core.wmem_max allows is set on every
// accepted connection (Linux reports twice the figure asked for), and the
// first connection logs it.
func TestSendBufferSet(t *testing.T) {
	const size = 64 << 10 // below every default net.core.wmem_max (208 KiB)
	limit, err := wmemMax()
	if err != nil {
		t.Skipf("no net.core.wmem_max to compare with: %v", err)
	}
	if limit < size {
		t.Skipf("net.core.wmem_max is %d, below %d", limit, size)
	}
	c, log := accept(t, size, true)
	if got := kernelSendBuffer(t, c); got != 2*size {
		t.Errorf("SO_SNDBUF %d, want %d (twice %d)", got, 2*size, size)
	}
	if !strings.Contains(log, "send buffer set") || !strings.Contains(log, `"kernel_bytes":131072`) {
		t.Errorf("log %q: want the buffer set, with the kernel's 131072 bytes", log)
	}
}

// TestSendBufferAboveWmemMax: past net.core.wmem_max the buffer is forced
// where the agent has CAP_NET_ADMIN, and otherwise left to the kernel's
// autotuning (SO_SNDBUF would cap it at wmem_max) with a warning that
// names the sysctl.
func TestSendBufferAboveWmemMax(t *testing.T) {
	limit, err := wmemMax()
	if err != nil {
		t.Skipf("no net.core.wmem_max to compare with: %v", err)
	}
	size := min(limit+1<<20, MaxSendBuffer)
	if size <= limit {
		t.Skipf("net.core.wmem_max %d is at MaxSendBuffer", limit)
	}
	t.Run("without CAP_NET_ADMIN", func(t *testing.T) {
		c, log := accept(t, size, false)
		if got := kernelSendBuffer(t, c); got >= 2*size || got == 2*limit {
			t.Errorf("SO_SNDBUF %d: want the kernel's autotuned buffer, neither %d nor wmem_max's %d", got, 2*size, 2*limit)
		}
		if !strings.Contains(log, `"level":"warn"`) || !strings.Contains(log, "net.core.wmem_max") {
			t.Errorf("log %q: want a warning naming net.core.wmem_max", log)
		}
	})
	t.Run("forced", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("SO_SNDBUFFORCE needs CAP_NET_ADMIN: not root")
		}
		c, log := accept(t, size, true)
		if got := kernelSendBuffer(t, c); got != 2*size || !strings.Contains(log, "SO_SNDBUFFORCE") {
			t.Errorf("SO_SNDBUF %d, log %q; want %d, forced", got, log, 2*size)
		}
	})
}
