// Package tcpinfo is what both agents read from and set on their TCP
// connections: the kernel's TCP_INFO (round trip, retransmits, bytes in
// flight, delivery rate; Read), the congestion control algorithm
// (TCP_CONGESTION; SetCongestion, Check), a set of live connections whose
// figures add up (Conns), and the text form in which a storage agent
// tells a compute agent what its end of their connection sees (Info.Encode,
// Parse). On platforms other than Linux, Read and SetCongestion fail with
// ErrUnavailable and the callers fall back (a timed RPC for the round
// trip, the host's congestion control).
package tcpinfo

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FlagUsage is the --tcp-congestion flag's help, the same on both agents.
const FlagUsage = "TCP congestion control `algorithm` (TCP_CONGESTION) of every connection to the other agents, e.g. bbr or cubic; " +
	"one the kernel lacks (/proc/sys/net/ipv4/tcp_available_congestion_control) refuses to start. " +
	"Empty keeps the host's default (net.ipv4.tcp_congestion_control): the choice is the operator's, who may have set bbr where the kernel has it; " +
	"on a long lossy link bbr keeps a connection's rate where cubic falls to a few Mbit/s. " +
	"The storage agent's Info names what its connections run, and a compute agent with --conns 0 opens one connection to a bbr sender, " +
	"several to a loss-based one on a long lossy path"

// ErrUnavailable: the platform offers no TCP_INFO or TCP_CONGESTION, or
// the connection is not a TCP socket (an in-memory pipe in tests).
var ErrUnavailable = errors.New("tcpinfo: not available")

// ErrCongestion: the kernel lacks the congestion control asked for.
var ErrCongestion = errors.New("tcpinfo: congestion control not available")

// Info is one reading of TCP_INFO on one end of a connection. Counters
// (Retransmits, SegmentsOut, Bytes*) run over the connection's life; take
// two readings' difference (Sub) for an interval.
type Info struct {
	// RTT is the smoothed round trip (srtt) and RTTVar its variance, as
	// this end measures it from the acknowledgements of what it sent;
	// MinRTT is the least round trip the kernel saw in its recent window
	// (0 where the kernel does not report it). RcvRTT is the receiver's
	// estimate from the data it received (0 until it has one).
	RTT, RTTVar, MinRTT, RcvRTT time.Duration
	// Retransmits counts the segments this end sent again (total_retrans)
	// and SegmentsOut every segment it sent (segs_out); their ratio over
	// an interval is the loss this end's sending saw.
	Retransmits, SegmentsOut uint64
	// InFlight is the bytes sent and not yet acknowledged: tcpi_unacked
	// segments of tcpi_snd_mss bytes.
	InFlight int64
	// BytesSent, BytesAcked and BytesReceived are the payload bytes this
	// end sent (retransmits included), had acknowledged, and received.
	BytesSent, BytesAcked, BytesReceived uint64
	// DeliveryRate is the kernel's latest estimate of the rate this end's
	// data is delivered at, bytes/s (0: none yet).
	DeliveryRate float64
	// Cwnd is the congestion window in segments and MSS the sending
	// segment size.
	Cwnd, MSS uint32
}

// rawConn returns the socket under c: c itself, or, through NetConn (a
// *tls.Conn, a Conns wrapper), the connection it wraps.
func rawConn(c net.Conn) (syscall.RawConn, error) {
	for range 8 {
		if sc, ok := c.(syscall.Conn); ok {
			return sc.SyscallConn()
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	return nil, fmt.Errorf("%w: %T is not a socket", ErrUnavailable, c)
}

// Sub is i's counters less those of an earlier reading of the same
// connection (a counter that went backwards counts 0); the gauges (round
// trips, InFlight, DeliveryRate, Cwnd, MSS) are i's.
func (i Info) Sub(before Info) Info {
	d := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	i.Retransmits = d(i.Retransmits, before.Retransmits)
	i.SegmentsOut = d(i.SegmentsOut, before.SegmentsOut)
	i.BytesSent = d(i.BytesSent, before.BytesSent)
	i.BytesAcked = d(i.BytesAcked, before.BytesAcked)
	i.BytesReceived = d(i.BytesReceived, before.BytesReceived)
	return i
}

// Loss is Retransmits over SegmentsOut (0 when nothing was sent).
func (i Info) Loss() float64 {
	if i.SegmentsOut == 0 {
		return 0
	}
	return float64(i.Retransmits) / float64(i.SegmentsOut)
}

// Sum adds readings of several connections between the same two hosts
// (a pool): counters, InFlight and DeliveryRate add up, RTT and RTTVar are
// the mean of the connections that have one, MinRTT and RcvRTT the least
// non-zero.
func Sum(infos []Info) Info {
	var s Info
	var rtt, rttVar time.Duration
	n := 0
	least := func(a, b time.Duration) time.Duration {
		if a == 0 || (b > 0 && b < a) {
			return b
		}
		return a
	}
	for _, i := range infos {
		s.Retransmits += i.Retransmits
		s.SegmentsOut += i.SegmentsOut
		s.InFlight += i.InFlight
		s.BytesSent += i.BytesSent
		s.BytesAcked += i.BytesAcked
		s.BytesReceived += i.BytesReceived
		s.DeliveryRate += i.DeliveryRate
		s.Cwnd += i.Cwnd
		s.MSS = max(s.MSS, i.MSS)
		s.MinRTT = least(s.MinRTT, i.MinRTT)
		s.RcvRTT = least(s.RcvRTT, i.RcvRTT)
		if i.RTT > 0 {
			rtt += i.RTT
			rttVar += i.RTTVar
			n++
		}
	}
	if n > 0 {
		s.RTT, s.RTTVar = rtt/time.Duration(n), rttVar/time.Duration(n)
	}
	return s
}

// Conns is a set of live connections (a storage agent's pool as the
// compute agent dialled it, or the connections a storage agent accepted):
// Track adds one and its Close removes it. The zero value is ready; safe
// for concurrent use.
type Conns struct {
	mu sync.Mutex
	m  map[*tracked]struct{}
}

// tracked is a connection in a Conns; NetConn unwraps it (for Read and a
// *tls.Conn's peers).
type tracked struct {
	net.Conn
	set  *Conns
	once sync.Once
}

func (t *tracked) NetConn() net.Conn { return t.Conn }

func (t *tracked) Close() error {
	t.once.Do(func() {
		t.set.mu.Lock()
		delete(t.set.m, t)
		t.set.mu.Unlock()
	})
	return t.Conn.Close()
}

// Track adds c to s until the returned connection, which wraps c, is
// closed.
func (s *Conns) Track(c net.Conn) net.Conn {
	t := &tracked{Conn: c, set: s}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[*tracked]struct{}{}
	}
	s.m[t] = struct{}{}
	s.mu.Unlock()
	return t
}

// Len is how many connections s holds.
func (s *Conns) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Read reads every live connection of s and sums them (Sum); n is how
// many it read. It fails with ErrUnavailable when none could be read (no
// connection, or no TCP_INFO here).
func (s *Conns) Read() (sum Info, n int, err error) {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.m))
	for t := range s.m {
		conns = append(conns, t.Conn)
	}
	s.mu.Unlock()
	infos := make([]Info, 0, len(conns))
	err = fmt.Errorf("%w: no connection", ErrUnavailable)
	for _, c := range conns {
		i, rerr := Read(c)
		if rerr != nil {
			err = rerr
			continue
		}
		infos = append(infos, i)
	}
	if len(infos) == 0 {
		return Info{}, 0, err
	}
	return Sum(infos), len(infos), nil
}

// Lookup returns the connection of s whose remote address is addr (the
// peer of an RPC), if any.
func (s *Conns) Lookup(addr string) (net.Conn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.m {
		if a := t.RemoteAddr(); a != nil && a.String() == addr {
			return t.Conn, true
		}
	}
	return nil, false
}

// Header is the gRPC metadata key under which a storage agent sends the
// TCP_INFO of its end of the connection that carried an Info call
// (Info.Encode): the sender's view of the data's direction, which the
// compute agent, the receiver, cannot read on its own socket (the
// storage agent's retransmits and bytes in flight).
const Header = "sophon-tcpinfo"

// Encode is i as one line of key=value fields: durations in microseconds,
// rates in bytes/s.
func (i Info) Encode() string {
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return strings.Join([]string{
		"rtt_us=" + us(i.RTT), "rttvar_us=" + us(i.RTTVar), "minrtt_us=" + us(i.MinRTT), "rcvrtt_us=" + us(i.RcvRTT),
		"retrans=" + u(i.Retransmits), "segs_out=" + u(i.SegmentsOut), "inflight=" + strconv.FormatInt(i.InFlight, 10),
		"sent=" + u(i.BytesSent), "acked=" + u(i.BytesAcked), "received=" + u(i.BytesReceived),
		"delivery=" + strconv.FormatFloat(i.DeliveryRate, 'f', 0, 64),
		"cwnd=" + u(uint64(i.Cwnd)), "mss=" + u(uint64(i.MSS)),
	}, " ")
}

// maxEncoded bounds what Parse reads: Encode's line is under 300 bytes.
const maxEncoded = 1024

// ErrMalformed: a header that is not Encode's form.
var ErrMalformed = errors.New("tcpinfo: malformed header")

// Parse reads Encode's form. Fields it does not know are skipped (a newer
// agent may send more); a known field that does not parse, a negative
// figure or a line past 1 KiB fails with ErrMalformed.
func Parse(s string) (Info, error) {
	var i Info
	if len(s) > maxEncoded {
		return Info{}, fmt.Errorf("%w: %d bytes", ErrMalformed, len(s))
	}
	for f := range strings.FieldsSeq(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Info{}, fmt.Errorf("%w: field %q", ErrMalformed, f)
		}
		var err error
		num := func() uint64 {
			var n uint64
			if err == nil {
				n, err = strconv.ParseUint(v, 10, 63)
			}
			return n
		}
		us := func() time.Duration { return time.Duration(min(num(), uint64(1<<62)/1000)) * time.Microsecond }
		switch k {
		case "rtt_us":
			i.RTT = us()
		case "rttvar_us":
			i.RTTVar = us()
		case "minrtt_us":
			i.MinRTT = us()
		case "rcvrtt_us":
			i.RcvRTT = us()
		case "retrans":
			i.Retransmits = num()
		case "segs_out":
			i.SegmentsOut = num()
		case "inflight":
			i.InFlight = int64(num())
		case "sent":
			i.BytesSent = num()
		case "acked":
			i.BytesAcked = num()
		case "received":
			i.BytesReceived = num()
		case "delivery":
			i.DeliveryRate = float64(min(num(), 1<<53)) // exact in a float64
		case "cwnd":
			i.Cwnd = uint32(min(num(), 1<<32-1))
		case "mss":
			i.MSS = uint32(min(num(), 1<<32-1))
		}
		if err != nil {
			return Info{}, fmt.Errorf("%w: field %q: %v", ErrMalformed, f, err)
		}
	}
	return i, nil
}
