package storageagent

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/tcpinfo"
)

// DefaultSendBuffer is the kernel send buffer (SO_SNDBUF) the agent asks
// for on every connection it accepts; Linux doubles the figure for its
// own bookkeeping. Under a CPU quota (a cgroup, a Kubernetes limit) the
// agent is throttled for the rest of each CFS period (100 ms) once its
// group has spent the quota, and in that time only what is already in the
// socket's buffer crosses the link: the kernel's autotuning sizes the
// buffer to the congestion window, a few tens of milliseconds of a shaped
// link, so the link would idle through every throttled period. 4 MiB (8 MiB
// in the kernel) holds 100 ms of a 600 Mbit/s link; for faster links set
// Config.SendBuffer to the egress rate times 100 to 200 ms.
const DefaultSendBuffer = 4 << 20

// MaxSendBuffer bounds Config.SendBuffer: the kernel keeps up to twice
// that per connection.
const MaxSendBuffer = 256 << 20

// sendBuffer is what setting a connection's send buffer did.
type sendBuffer struct {
	// How is the socket option that set it ("SO_SNDBUFFORCE", "SO_SNDBUF"),
	// or "" when the kernel's autotuning was left in place.
	How string
	// Limit is net.core.wmem_max when it kept the buffer from being set:
	// SO_SNDBUF is capped there, and SO_SNDBUFFORCE needs CAP_NET_ADMIN.
	Limit int
	// Bytes is the buffer the kernel reports afterwards (SO_SNDBUF).
	Bytes int
	// Err is a failure of the socket calls; the connection is served
	// anyway, with the kernel's buffer.
	Err error
}

// connListener sets up every TCP connection it accepts: its send buffer
// (setSendBuffer, when size is positive) and its congestion control (when
// congestion is set), logging the outcome of the first; and it tracks the
// connections in conns (the Info call's TCP_INFO header, server.Info).
type connListener struct {
	net.Listener
	size       int
	congestion string
	conns      *tcpinfo.Conns
	// cc, when set, keeps the congestion control the kernel then had on
	// each accepted connection (the server's, for Info).
	cc *atomic.Value
	// force tries SO_SNDBUFFORCE first (the agent always does; tests turn
	// it off to see the path of an agent without CAP_NET_ADMIN).
	force bool
	log   zerolog.Logger
	once  sync.Once
}

func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	var r sendBuffer
	if l.size > 0 {
		r = setSendBuffer(tc, l.size, l.force)
	}
	cerr := tcpinfo.SetCongestion(tc, l.congestion)
	l.once.Do(func() {
		if l.size > 0 {
			r.log(l.log, l.size)
		}
		if l.congestion != "" {
			if cerr != nil {
				l.log.Error().Err(cerr).Msg("could not set the connections' congestion control; the host's default stays")
			} else {
				l.log.Info().Str("tcp_congestion", l.congestion).Msg("connections' congestion control set")
			}
		}
	})
	if l.cc != nil {
		if name, err := tcpinfo.Congestion(tc); err == nil && name != "" {
			l.cc.Store(name)
		}
	}
	if l.conns != nil {
		return l.conns.Track(tc), nil
	}
	return tc, nil
}

// log reports r once per agent: a buffer that could not be set is a
// warning, since a throttled agent then leaves its link idle.
func (r sendBuffer) log(log zerolog.Logger, size int) {
	switch {
	case r.Err != nil:
		log.Warn().Err(r.Err).Int("send_buffer", size).Msg("could not set the connections' send buffer; the kernel's autotuning stays")
	case r.How == "":
		log.Warn().Int("send_buffer", size).Int("wmem_max", r.Limit).Int("kernel_bytes", r.Bytes).
			Msg("net.core.wmem_max is below --send-buffer and the agent lacks CAP_NET_ADMIN: the kernel's autotuning stays, " +
				"and a CPU limit that throttles the agent idles the link; raise net.core.wmem_max (sysctl -w net.core.wmem_max=BYTES) " +
				"or grant CAP_NET_ADMIN")
	default:
		log.Info().Int("send_buffer", size).Str("how", r.How).Int("kernel_bytes", r.Bytes).Msg("connections' send buffer set")
	}
}
