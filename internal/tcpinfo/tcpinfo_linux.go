package tcpinfo

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Read reads TCP_INFO of c (a TCP connection, or one that wraps it through
// NetConn).
func Read(c net.Conn) (Info, error) {
	raw, err := rawConn(c)
	if err != nil {
		return Info{}, err
	}
	var ti *unix.TCPInfo
	var gerr error
	if err := raw.Control(func(fd uintptr) { ti, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return Info{}, fmt.Errorf("tcpinfo: %w", err)
	}
	if gerr != nil {
		return Info{}, fmt.Errorf("%w: TCP_INFO: %v", ErrUnavailable, gerr)
	}
	us := func(v uint32) time.Duration { return time.Duration(v) * time.Microsecond }
	return Info{
		RTT:           us(ti.Rtt),
		RTTVar:        us(ti.Rttvar),
		MinRTT:        us(ti.Min_rtt),
		RcvRTT:        us(ti.Rcv_rtt),
		Retransmits:   uint64(ti.Total_retrans),
		SegmentsOut:   uint64(ti.Segs_out),
		InFlight:      int64(ti.Unacked) * int64(ti.Snd_mss),
		BytesSent:     ti.Bytes_sent,
		BytesAcked:    ti.Bytes_acked,
		BytesReceived: ti.Bytes_received,
		DeliveryRate:  float64(ti.Delivery_rate),
		Cwnd:          ti.Snd_cwnd,
		MSS:           ti.Snd_mss,
	}, nil
}

// SetCongestion sets c's congestion control to name (TCP_CONGESTION).
// Set it before data flows; an empty name changes nothing.
func SetCongestion(c net.Conn, name string) error {
	if name == "" {
		return nil
	}
	raw, err := rawConn(c)
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name) }); err != nil {
		return fmt.Errorf("tcpinfo: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("%w: %q: %v", ErrCongestion, name, serr)
	}
	return nil
}

// Congestion reads c's congestion control (TCP_CONGESTION).
func Congestion(c net.Conn) (string, error) {
	raw, err := rawConn(c)
	if err != nil {
		return "", err
	}
	var name string
	var gerr error
	if err := raw.Control(func(fd uintptr) { name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION) }); err != nil {
		return "", fmt.Errorf("tcpinfo: %w", err)
	}
	if gerr != nil {
		return "", fmt.Errorf("%w: TCP_CONGESTION: %v", ErrUnavailable, gerr)
	}
	return strings.TrimRight(name, "\x00"), nil
}

// availablePath lists the congestion controls the kernel has loaded.
const availablePath = "/proc/sys/net/ipv4/tcp_available_congestion_control"

// Available is the congestion controls the kernel offers
// (net.ipv4.tcp_available_congestion_control).
func Available() ([]string, error) {
	b, err := os.ReadFile(availablePath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return strings.Fields(string(b)), nil
}

// Check fails with ErrCongestion, naming the ones the kernel offers, when
// name is not among them; the empty name (the host's default) passes.
func Check(name string) error {
	if name == "" {
		return nil
	}
	avail, err := Available()
	if err != nil {
		return fmt.Errorf("%w: %q: cannot read %s: %v", ErrCongestion, name, availablePath, err)
	}
	if !slices.Contains(avail, name) {
		return fmt.Errorf("%w: %q is not in %s (%s); load its module (modprobe tcp_%s) or choose one of those",
			ErrCongestion, name, availablePath, strings.Join(avail, " "), name)
	}
	return nil
}
