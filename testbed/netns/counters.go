package netns

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DevCounters are one interface's kernel counters (/proc/net/dev, the same
// as /sys/class/net/<dev>/statistics).
type DevCounters struct {
	RxBytes, RxPackets, TxBytes, TxPackets uint64
}

// Sub returns c - prev, field by field.
func (c DevCounters) Sub(prev DevCounters) DevCounters {
	return DevCounters{
		RxBytes: c.RxBytes - prev.RxBytes, RxPackets: c.RxPackets - prev.RxPackets,
		TxBytes: c.TxBytes - prev.TxBytes, TxPackets: c.TxPackets - prev.TxPackets,
	}
}

// Counters are both veth ends' counters at one moment. Bytes are counted at
// layer 2: each packet's Ethernet header (14 B) plus its IP packet.
type Counters struct {
	Storage, Compute DevCounters
}

// Sub returns c - prev.
func (c Counters) Sub(prev Counters) Counters {
	return Counters{Storage: c.Storage.Sub(prev.Storage), Compute: c.Compute.Sub(prev.Compute)}
}

// Counters reads both veth ends' counters (Node.Counters).
func (p *Pair) Counters() (Counters, error) {
	s, err := p.side(true).Counters()
	if err != nil {
		return Counters{}, err
	}
	c, err := p.side(false).Counters()
	if err != nil {
		return Counters{}, err
	}
	return Counters{Storage: s, Compute: c}, nil
}

// devCounters reads dev's counters inside the named namespace.
func devCounters(ns, dev string) (DevCounters, error) {
	b, err := readInNamespace(ns, "/proc/thread-self/net/dev")
	if err != nil {
		return DevCounters{}, err
	}
	return parseNetDev(b, dev)
}

// readInNamespace reads file from a thread that has joined the network
// namespace ns.
func readInNamespace(ns, file string) ([]byte, error) {
	var b []byte
	err := withNamespace(ns, func() (err error) {
		b, err = os.ReadFile(file)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns: %s in %s: %w", file, ns, err)
	}
	return b, nil
}

// withNamespace runs f on a locked OS thread that has joined the network
// namespace ns, then returns the thread to its own namespace. Sockets f
// creates stay in ns. f runs on a goroutine of its own, so that a thread
// that cannot return ends with it.
func withNamespace(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- switchAndRun(ns, f) }()
	return <-errc
}

func switchAndRun(ns string, f func() error) error {
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: setns %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// NB: the thread stays in the wrong namespace: leave it locked so
		// the runtime ends it with this goroutine instead of reusing it.
		return errors.Join(ferr, fmt.Errorf("netns: setns back: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// parseNetDev finds dev in the text of /proc/net/dev.
func parseNetDev(b []byte, dev string) (DevCounters, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) != dev {
			continue
		}
		// rx: bytes packets errs drop fifo frame compressed multicast;
		// tx: bytes packets ...
		f := strings.Fields(rest)
		if len(f) < 10 {
			return DevCounters{}, fmt.Errorf("netns: /proc/net/dev: short line for %s", dev)
		}
		var v [4]uint64
		for i, idx := range []int{0, 1, 8, 9} {
			n, err := strconv.ParseUint(f[idx], 10, 64)
			if err != nil {
				return DevCounters{}, fmt.Errorf("netns: /proc/net/dev: %s: %w", dev, err)
			}
			v[i] = n
		}
		return DevCounters{RxBytes: v[0], RxPackets: v[1], TxBytes: v[2], TxPackets: v[3]}, nil
	}
	return DevCounters{}, fmt.Errorf("netns: no interface %s", dev)
}

// QdiscStats are the counters of the root qdisc on one interface, as tc
// reports them. Bytes count what the shaper charged: for a GSO packet,
// every segment's headers, which the interface counters (one set of
// headers per GSO packet) do not see.
type QdiscStats struct {
	Kind                              string
	Bytes, Packets, Drops, Overlimits uint64
}

// Qdisc reads the root qdisc's counters of the storage end (storageSide)
// or the compute end (Node.Qdisc).
func (p *Pair) Qdisc(ctx context.Context, storageSide bool) (QdiscStats, error) {
	return p.side(storageSide).Qdisc(ctx)
}

// rootQdisc reads the counters of the root qdisc on dev in namespace ns,
// through `tc -s -j qdisc show`.
func rootQdisc(ctx context.Context, ns, dev string) (QdiscStats, error) {
	out, err := output(ctx, "tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev)
	if err != nil {
		return QdiscStats{}, err
	}
	var qs []struct {
		Kind       string `json:"kind"`
		Root       bool   `json:"root"`
		Bytes      uint64 `json:"bytes"`
		Packets    uint64 `json:"packets"`
		Drops      uint64 `json:"drops"`
		Overlimits uint64 `json:"overlimits"`
	}
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		return QdiscStats{}, fmt.Errorf("netns: tc -j output: %w", err)
	}
	for _, q := range qs {
		if q.Root {
			return QdiscStats{Kind: q.Kind, Bytes: q.Bytes, Packets: q.Packets, Drops: q.Drops, Overlimits: q.Overlimits}, nil
		}
	}
	return QdiscStats{}, fmt.Errorf("netns: no root qdisc on %s in %s", dev, ns)
}
