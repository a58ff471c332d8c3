package shape

import (
	"context"
	"net"
	"sync"
)

// maxChunk bounds the bytes one Read or Write moves per bucket wait, so a
// large write is paced in steps instead of one burst after one long wait.
const maxChunk = 32 << 10

// Conn wraps c so that reads spend tokens from read and writes from write;
// either may be nil (unshaped), and one bucket may serve many connections
// (their aggregate is then bounded). A write is sent in chunks, each after
// its tokens are paid; a read returns at most one chunk and waits for its
// tokens after reading, which throttles the sender through TCP's receive
// window. Closing the connection interrupts a wait.
func Conn(c net.Conn, read, write *Bucket) net.Conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{Conn: c, read: read, write: write, ctx: ctx, cancel: cancel}
}

type conn struct {
	net.Conn
	read, write *Bucket
	ctx         context.Context // ended by Close
	cancel      context.CancelFunc
	closeOnce   sync.Once
	closeErr    error
}

func chunk(b *Bucket) int {
	return min(maxChunk, max(b.Burst(), 1))
}

func (c *conn) Read(p []byte) (int, error) {
	if c.read == nil {
		return c.Conn.Read(p)
	}
	if len(p) > chunk(c.read) {
		p = p[:chunk(c.read)]
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if werr := c.read.Wait(c.ctx, n); werr != nil && err == nil {
			err = net.ErrClosed
		}
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	if c.write == nil {
		return c.Conn.Write(p)
	}
	done := 0
	for done < len(p) {
		n := min(len(p)-done, chunk(c.write))
		if err := c.write.Wait(c.ctx, n); err != nil {
			return done, net.ErrClosed
		}
		m, err := c.Conn.Write(p[done : done+n])
		done += m
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.closeErr = c.Conn.Close()
	})
	return c.closeErr
}
