//go:build !linux

package storageagent

import "net"

// setSendBuffer sets c's send buffer to size bytes with SO_SNDBUF.
func setSendBuffer(c *net.TCPConn, size int, _ bool) sendBuffer {
	if err := c.SetWriteBuffer(size); err != nil {
		return sendBuffer{Err: err}
	}
	return sendBuffer{How: "SO_SNDBUF", Bytes: size}
}
