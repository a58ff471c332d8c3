package netns

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// This file is the user-space delay line: what carries the two-node link's
// packets when it has a round trip, jitter or loss (tbf is all this kernel
// has; it lacks netem). Each namespace holds a TUN device in place of a
// veth end; this process holds both devices' files and moves IP packets
// between them, one lane per direction:
//
//	storage ns                   this process                     compute ns
//	TCP -> tbf -> [tun s] --read--> lane: FIFO, each packet due --write--> [tun c] -> TCP
//	                                at arrival + RTT/2 ± jitter,
//	                                or dropped (loss, or full)
//	TCP <- [tun s] <--write-- lane <--read-- [tun c] <- tbf <- TCP
//
// A lane's reader stamps each packet with its due time as it reads it and
// queues it; its writer sleeps until the head of the queue is due and
// writes it out. Due times never decrease within a lane, so the queue is a
// FIFO and nothing is reordered. The rate is still tbf's, on each TUN
// device's egress inside its namespace, so the delay line never paces: it
// only delays, drops and copies.

// DefaultMTU is the TUN devices' MTU when Config.MTU is zero: Ethernet's,
// so that TCP's segments, and what one loss costs it, are as on a real
// link.
const DefaultMTU = 1500

// TCP/IPv4 header bytes of every segment the nodes send: IPv4's 20, TCP's
// 20 and the timestamp option's 12 (Linux's default, tcp_timestamps=1);
// on a veth each frame also carries Ethernet's 14.
const (
	segmentHeaderBytes  = 20 + 20 + 12
	ethernetHeaderBytes = 14
)

// PayloadFraction is the share of a shaped rate that TCP's payload can
// have on a link of this MTU: tbf charges every segment's headers, a large
// GSO packet's included (the kernel counts each segment's headers into its
// length, qdisc_pkt_len_init), so full segments of MTU-52 payload bytes
// cost MTU bytes of the rate on the delay line's TUN devices (IP packets)
// and MTU+14 on a veth (Ethernet frames): 1448/1514 = 0.956 at MTU 1500 on
// the veth pair. What TLS and HTTP/2 add inside the payload is the
// agents', not the link's.
func PayloadFraction(mtu int, ethernet bool) float64 {
	if mtu <= segmentHeaderBytes {
		return 0
	}
	frame := mtu
	if ethernet {
		frame += ethernetHeaderBytes
	}
	return float64(mtu-segmentHeaderBytes) / float64(frame)
}

const (
	// lanePackets bounds a lane's queue in packets, whatever their size.
	lanePackets = 1 << 15
	// smallPacket is the size of the small buffers: a packet read into a
	// full-size buffer that fits one (an ACK) is copied into one, so the
	// queue's memory is close to its bytes.
	smallPacket = 256
	// early is how far ahead of its due time a packet may be written
	// once the writer is awake: it batches the writes of packets due
	// close together (at 500 Mbit/s a 1500-byte packet leaves every
	// 24 us) into one wake-up, at an error of at most this much.
	early = 100 * time.Microsecond
)

// lineConfig is what the delay line does to every packet, in each
// direction.
type lineConfig struct {
	// oneWay is the delay of every packet: half the round trip.
	oneWay time.Duration
	// jitter spreads the delay uniformly over oneWay ± jitter.
	jitter time.Duration
	// loss is the probability that a packet is dropped.
	loss float64
	// seed seeds both lanes' generators (each its own stream).
	seed int64
	// maxBytes bounds the bytes a lane holds; a packet beyond is dropped
	// and counted as overflow.
	maxBytes int64
	// mtu is the largest packet.
	mtu int
}

// LineStats count what one direction of the delay line did.
type LineStats struct {
	// Packets and Bytes were written out to the far side.
	Packets, Bytes uint64
	// Lost were dropped by the loss draw.
	Lost uint64
	// Overflow were dropped because the queue was full (lineConfig's
	// maxBytes, or lanePackets packets).
	Overflow uint64
	// Errors were packets the far device refused (written while it was
	// down, for instance); they are dropped.
	Errors uint64
}

// packet is one IP packet in a lane: its bytes are (*buf)[:n].
type packet struct {
	buf *[]byte
	n   int
	due time.Time
}

// lane carries one direction: it reads packets from in and writes them to
// out once due.
type lane struct {
	cfg     lineConfig
	in, out io.ReadWriter
	rng     *rand.Rand      // the reader's only
	last    time.Time       // the due time of the last packet queued; the reader's only
	q       chan packet     // due times never decrease along it
	queued  atomic.Int64    // bytes in q
	stop    <-chan struct{} // closed when the line stops
	// timer is the writer's timerfd, in Go's poller: it wakes the writer
	// when the head is due to within the kernel's timer slack (tens of
	// microseconds), where Go's own timers may wake it up to a millisecond
	// late, and without blocking a thread in a system call as nanosleep(2)
	// would. Closing it ends a wait.
	timer *os.File
	big   sync.Pool // *[]byte of cfg.mtu bytes
	small sync.Pool // *[]byte of smallPacket bytes

	packets, bytes, lost, overflow, errs atomic.Uint64
}

// delayLine is both lanes and the goroutines that run them.
type delayLine struct {
	lanes [2]*lane // storage to compute, compute to storage
	ends  [2]io.Closer
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	mu  sync.Mutex
	err error // the first error a goroutine met
}

// startLine starts the delay line between a and b (the storage and the
// compute TUN devices): one reader and one writer per direction. It owns a
// and b from now on: close closes them, and so does an error here.
func startLine(cfg lineConfig, a, b io.ReadWriteCloser) (*delayLine, error) {
	l := &delayLine{ends: [2]io.Closer{a, b}, stop: make(chan struct{})}
	for i := range l.lanes {
		fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
		if err != nil {
			for _, ln := range l.lanes[:i] {
				ln.timer.Close()
			}
			return nil, errors.Join(fmt.Errorf("netns: delay line: timerfd: %w", err), a.Close(), b.Close())
		}
		l.lanes[i] = &lane{timer: os.NewFile(uintptr(fd), "timerfd")}
	}
	for i, ends := range [2][2]io.ReadWriter{{a, b}, {b, a}} {
		ln := l.lanes[i]
		ln.cfg, ln.in, ln.out, ln.stop = cfg, ends[0], ends[1], l.stop
		ln.rng = rand.New(rand.NewPCG(uint64(cfg.seed), uint64(i)))
		ln.q = make(chan packet, lanePackets)
		ln.big.New = func() any { b := make([]byte, cfg.mtu); return &b }
		ln.small.New = func() any { b := make([]byte, smallPacket); return &b }
		l.wg.Go(func() { l.fail(ln.read()) })
		l.wg.Go(func() { l.fail(ln.write()) })
	}
	return l, nil
}

// fail records err, the first only; nil is ignored.
func (l *delayLine) fail(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// close stops the writers, closes both ends (which ends the readers'
// reads) and waits for all four goroutines. It returns the first error a
// goroutine met, if any. It is safe to call twice.
func (l *delayLine) close() error {
	l.once.Do(func() {
		close(l.stop)
		var errs []error
		for _, ln := range l.lanes {
			ln.timer.Close()
		}
		for _, c := range l.ends {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("netns: delay line: %w", err))
			}
		}
		l.wg.Wait()
		l.fail(errors.Join(errs...))
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// stats returns what each direction has done so far: storage to compute,
// then compute to storage.
func (l *delayLine) stats() (toCompute, toStorage LineStats) {
	return l.lanes[0].stats(), l.lanes[1].stats()
}

func (ln *lane) stats() LineStats {
	return LineStats{Packets: ln.packets.Load(), Bytes: ln.bytes.Load(), Lost: ln.lost.Load(),
		Overflow: ln.overflow.Load(), Errors: ln.errs.Load()}
}

// closed reports whether err is what a read or write on a closed end
// returns: os.ErrClosed for a TUN device's file, net.ErrClosed or io.EOF
// for the fakes in tests.
func closed(err error) bool {
	return errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)
}

// read reads packets from in until it is closed, stamps each with its due
// time and queues it, or drops it (loss, or a full queue).
func (ln *lane) read() error {
	for {
		bp := ln.big.Get().(*[]byte)
		n, err := ln.in.Read(*bp)
		if err != nil {
			ln.big.Put(bp)
			if closed(err) {
				return nil
			}
			select {
			case <-ln.stop:
				return nil
			default:
			}
			return fmt.Errorf("netns: delay line: read: %w", err)
		}
		now := time.Now()
		if ln.cfg.loss > 0 && ln.rng.Float64() < ln.cfg.loss {
			ln.lost.Add(1)
			ln.big.Put(bp)
			continue
		}
		if n <= smallPacket {
			sp := ln.small.Get().(*[]byte)
			copy(*sp, (*bp)[:n])
			ln.big.Put(bp)
			bp = sp
		}
		ln.enqueue(packet{buf: bp, n: n, due: ln.due(now)})
	}
}

// due draws the due time of a packet read at now: now + oneWay ± jitter,
// but never before the packet ahead of it.
func (ln *lane) due(now time.Time) time.Time {
	d := ln.cfg.oneWay
	if j := ln.cfg.jitter; j > 0 {
		d += time.Duration((2*ln.rng.Float64() - 1) * float64(j))
		d = max(d, 0)
	}
	due := now.Add(d)
	if due.Before(ln.last) {
		due = ln.last
	}
	return due
}

// enqueue queues p, or drops it when the queue is full.
func (ln *lane) enqueue(p packet) {
	if ln.queued.Add(int64(p.n)) <= ln.cfg.maxBytes {
		select {
		case ln.q <- p:
			ln.last = p.due
			return
		default:
		}
	}
	ln.queued.Add(-int64(p.n))
	ln.overflow.Add(1)
	ln.release(p)
}

// release returns p's buffer to its pool.
func (ln *lane) release(p packet) {
	if cap(*p.buf) == smallPacket {
		ln.small.Put(p.buf)
	} else {
		ln.big.Put(p.buf)
	}
}

// write takes each packet from the queue when it is due and writes it to
// out, until the line stops.
func (ln *lane) write() error {
	for {
		var p packet
		select {
		case p = <-ln.q:
		case <-ln.stop:
			return nil
		}
		ln.queued.Add(-int64(p.n))
		if !ln.wait(p.due) {
			ln.release(p)
			return nil
		}
		_, err := ln.out.Write((*p.buf)[:p.n])
		ln.release(p)
		switch {
		case err == nil:
			ln.packets.Add(1)
			ln.bytes.Add(uint64(p.n))
		case closed(err):
			return nil
		default:
			// NB: a device that is down refuses writes (EIO); the packet is
			// lost as on a link that is down, and the line goes on.
			ln.errs.Add(1)
		}
	}
}

// wait sleeps on the lane's timerfd until due (packets due within early
// go at once); it returns false when the line stops meanwhile.
func (ln *lane) wait(due time.Time) bool {
	d := time.Until(due)
	if d <= early {
		return true
	}
	conn, err := ln.timer.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	err = conn.Control(func(fd uintptr) {
		its := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
		serr = unix.TimerfdSettime(int(fd), 0, &its, nil)
	})
	if err != nil {
		return false // closed
	}
	if serr != nil {
		// Cannot happen with a valid relative time; stay correct if it does.
		time.Sleep(d)
		return true
	}
	var n [8]byte // the expirations count
	_, err = ln.timer.Read(n[:])
	return err == nil
}
