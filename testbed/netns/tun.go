package netns

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// This file builds the two-node link of a WAN (Config.RTT, Jitter, Loss):
// a TUN device in each namespace in place of the veth pair, joined by the
// delay line (delayline.go).

// WANBuffer is the largest TCP buffer (the third value of
// net.ipv4.tcp_rmem and tcp_wmem) in both namespaces of a link built on
// the delay line, unless the namespace's own is larger: 32 MiB, six times
// the 5 MB that 500 Mbit/s holds over 80 ms, so a bulk transfer is bound
// by the link, not by its socket buffers. (A new namespace copies the
// host's values; tcp_wmem's is often 4 MiB, less than that one round
// trip.)
const WANBuffer = 32 << 20

// txQueueLen is the TUN devices' transmit queue: the ring a device's
// packets wait in for the delay line's reader. The device drops, rather
// than pushes back, when it is full; tbf ahead of it releases at most its
// burst at once (4 ms of the rate, 170 packets at 500 Mbit/s).
const txQueueLen = 2000

// WAN reports whether the link needs the delay line: a round trip,
// jitter or loss, or DelayLine set.
func (c Config) WAN() bool {
	return c.RTT > 0 || c.Jitter > 0 || c.Loss > 0 || c.DelayLine
}

// checkWAN validates the WAN fields and fills in the MTU.
func (c *Config) checkWAN() error {
	switch {
	case c.RTT < 0 || c.Jitter < 0:
		return fmt.Errorf("%w: negative RTT or jitter", ErrConfig)
	case c.Loss < 0 || c.Loss >= 1 || math.IsNaN(c.Loss):
		return fmt.Errorf("%w: loss %v: want a fraction in [0, 1)", ErrConfig, c.Loss)
	case c.MTU != 0 && !c.WAN():
		return fmt.Errorf("%w: an MTU is only for the delay line (set RTT, Jitter, Loss or DelayLine)", ErrConfig)
	case c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535):
		return fmt.Errorf("%w: MTU %d: want 576 to 65535", ErrConfig, c.MTU)
	}
	if c.MTU == 0 && c.WAN() {
		c.MTU = DefaultMTU
	}
	return nil
}

// lineConfig is the delay line that cfg asks for. Its queue holds what
// the rate sends in the one-way delay, the jitter and one second more;
// without a rate, 64 MiB.
func (c Config) lineConfig() lineConfig {
	maxBytes := int64(64 << 20)
	if !c.Rate.IsZero() {
		span := c.RTT/2 + c.Jitter + time.Second
		maxBytes = max(int64(c.Rate.Bits()/8*span.Seconds()), 1<<20)
	}
	return lineConfig{oneWay: c.RTT / 2, jitter: c.Jitter, loss: c.Loss, seed: c.Seed, maxBytes: maxBytes, mtu: c.MTU}
}

// tunSteps configure a node's TUN device once it exists: its MTU and
// queue, no IPv6 link-local address (so the kernel sends nothing of its
// own across the line), the node's address and the device up. With no
// ARP on a point-to-point device, the subnet's route through it reaches
// the peer.
func (t *Topology) tunSteps(n *Node, mtu int) [][]string {
	return [][]string{
		{"ip", "-n", n.NS, "link", "set", "lo", "up"},
		{"ip", "-n", n.NS, "link", "set", n.Dev, "mtu", strconv.Itoa(mtu), "txqueuelen", strconv.Itoa(txQueueLen), "addrgenmode", "none"},
		{"ip", "-n", n.NS, "addr", "add", n.IP + "/" + strconv.Itoa(t.Subnet.Bits()), "dev", n.Dev},
		{"ip", "-n", n.NS, "link", "set", n.Dev, "up"},
	}
}

// openTUN creates TUN device name (IFF_TUN | IFF_NO_PI: bare IP packets)
// in namespace ns and returns its file, non-blocking and so served by Go's
// poller: closing it ends a blocked Read. The device lives as long as the
// file: closing the file deletes the device, and so does this process's
// death.
func openTUN(ns, name string) (*os.File, error) {
	var f *os.File
	err := withNamespace(ns, func() error {
		// NB: the device is made in the namespace that opened the file,
		// so the open happens here, on the thread that joined ns.
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("netns: open /dev/net/tun in %s: %w", ns, err)
		}
		ifr, err := unix.NewIfreq(name)
		if err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("netns: TUNSETIFF %s in %s: %w", name, ns, err)
		}
		f = os.NewFile(uintptr(fd), "tun:"+ns+"/"+name)
		return nil
	})
	return f, err
}

// openDevs creates the link's two TUN devices, storage then compute. On an
// error it closes what it opened.
func (t *Topology) openDevs() (s, c *os.File, err error) {
	if s, err = openTUN(t.Storage[0].NS, t.Storage[0].Dev); err != nil {
		return nil, nil, err
	}
	if c, err = openTUN(t.Compute[0].NS, t.Compute[0].Dev); err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, c, nil
}

// raiseTCPBuffers raises the largest TCP buffer (the third value of
// tcp_rmem and tcp_wmem) to WANBuffer in namespace ns, where it is
// smaller.
func raiseTCPBuffers(ns string) error {
	return withNamespace(ns, func() error {
		for _, name := range []string{"tcp_rmem", "tcp_wmem"} {
			file := "/proc/sys/net/ipv4/" + name
			b, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("netns: %s in %s: %w", file, ns, err)
			}
			f := strings.Fields(string(b))
			if len(f) != 3 {
				return fmt.Errorf("netns: %s in %s: %q: want three numbers", file, ns, b)
			}
			if hi, err := strconv.Atoi(f[2]); err == nil && hi >= WANBuffer {
				continue
			}
			v := f[0] + " " + f[1] + " " + strconv.Itoa(WANBuffer)
			if err := os.WriteFile(file, []byte(v), 0); err != nil {
				return fmt.Errorf("netns: %s in %s: %w", file, ns, err)
			}
		}
		return nil
	})
}
