package storageagent

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// setSendBuffer sets c's send buffer to size bytes: with SO_SNDBUFFORCE
// when force is set and the agent has CAP_NET_ADMIN (it ignores
// net.core.wmem_max), else with SO_SNDBUF where net.core.wmem_max allows
// size, else not at all, since SO_SNDBUF would cap it at wmem_max and turn
// off the autotuning that may grow past that.
func setSendBuffer(c *net.TCPConn, size int, force bool) (r sendBuffer) {
	raw, err := c.SyscallConn()
	if err != nil {
		return sendBuffer{Err: err}
	}
	cerr := raw.Control(func(fd uintptr) {
		s := int(fd)
		if force && syscall.SetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, size) == nil {
			r.How = "SO_SNDBUFFORCE"
		} else if limit, err := wmemMax(); err != nil {
			r.Err = err
		} else if limit < size {
			r.Limit = limit
		} else if err := syscall.SetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_SNDBUF, size); err != nil {
			r.Err = err
		} else {
			r.How = "SO_SNDBUF"
		}
		r.Bytes, _ = syscall.GetsockoptInt(s, syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	if cerr != nil {
		r.Err = cerr
	}
	return r
}

// wmemMax reads net.core.wmem_max, the most SO_SNDBUF may ask for.
func wmemMax() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/core/wmem_max")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
