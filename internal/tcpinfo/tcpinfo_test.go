package tcpinfo

import (
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// pair is a loopback TCP connection: the client and the server end.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	client, err = net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func needLinux(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("TCP_INFO and TCP_CONGESTION are Linux's, not %s's", runtime.GOOS)
	}
}

// TestReadLoopback: after a transfer, the sender's end counts the bytes
// sent and acknowledged and its segments, the receiver's the bytes
// received, and both have a round trip.
func TestReadLoopback(t *testing.T) {
	needLinux(t)
	c, s := pair(t)
	const n = 4 << 20
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, s, n)
		done <- err
	}()
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The last acknowledgements may still be on their way.
	var snd Info
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if snd, err = Read(c); err != nil {
			t.Fatal(err)
		}
		if snd.BytesAcked >= n || time.Now().After(deadline) {
			break
		}
	}
	rcv, err := Read(s)
	if err != nil {
		t.Fatal(err)
	}
	if snd.BytesSent < n || snd.BytesAcked < n || snd.SegmentsOut == 0 || snd.MSS == 0 || snd.Cwnd == 0 {
		t.Errorf("sender %+v: want %d bytes sent and acked, segments, an MSS and a window", snd, n)
	}
	if rcv.BytesReceived < n {
		t.Errorf("receiver got %d bytes, want %d", rcv.BytesReceived, n)
	}
	if snd.RTT <= 0 || snd.RTT > time.Second || snd.MinRTT > snd.RTT+snd.RTTVar*4 {
		t.Errorf("sender's round trip %v (min %v, var %v): want a loopback's, above 0", snd.RTT, snd.MinRTT, snd.RTTVar)
	}
	if snd.InFlight < 0 || snd.InFlight > n {
		t.Errorf("in flight %d: want 0 to %d", snd.InFlight, n)
	}
	d := snd.Sub(Info{BytesSent: n / 2, SegmentsOut: snd.SegmentsOut + 1})
	if d.BytesSent != snd.BytesSent-n/2 || d.SegmentsOut != 0 || d.RTT != snd.RTT {
		t.Errorf("Sub: %+v", d)
	}
}

// TestCongestion: an algorithm the kernel offers is set and read back on
// both ends of a connection; one it lacks fails Check with the list.
func TestCongestion(t *testing.T) {
	needLinux(t)
	avail, err := Available()
	if err != nil || len(avail) == 0 {
		t.Skipf("no list of congestion controls: %v", err)
	}
	c, s := pair(t)
	for _, name := range avail {
		for _, conn := range []net.Conn{c, s} {
			if err := SetCongestion(conn, name); err != nil {
				t.Fatalf("set %q: %v", name, err)
			}
			if got, err := Congestion(conn); err != nil || got != name {
				t.Errorf("read back %q, %v; want %q", got, err, name)
			}
		}
		if err := Check(name); err != nil {
			t.Errorf("Check(%q): %v", name, err)
		}
	}
	if err := Check(""); err != nil {
		t.Errorf("Check(\"\"): %v", err)
	}
	err = Check("no-such-cc")
	if !errors.Is(err, ErrCongestion) || !strings.Contains(err.Error(), avail[0]) {
		t.Errorf("Check(no-such-cc): %v; want ErrCongestion naming %v", err, avail)
	}
	if err := SetCongestion(c, "no-such-cc"); !errors.Is(err, ErrCongestion) {
		t.Errorf("SetCongestion(no-such-cc): %v, want ErrCongestion", err)
	}
}

// TestConns: tracked connections are read through their wrapper and
// summed, looked up by remote address, and leave the set when closed.
func TestConns(t *testing.T) {
	var set Conns
	if _, _, err := set.Read(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("empty set read: %v, want ErrUnavailable", err)
	}
	c1, s1 := pair(t)
	c2, _ := pair(t)
	w1, w2 := set.Track(c1), set.Track(c2)
	if set.Len() != 2 {
		t.Fatalf("len %d, want 2", set.Len())
	}
	if got, ok := set.Lookup(s1.LocalAddr().String()); !ok || got != c1 {
		t.Errorf("lookup by %v: %v %v, want the first connection", s1.LocalAddr(), got, ok)
	}
	if runtime.GOOS == "linux" {
		if _, err := w1.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(w1); err != nil {
			t.Errorf("read through the wrapper: %v", err)
		}
		_, n, err := set.Read()
		if err != nil || n != 2 {
			t.Errorf("read %d connections, %v; want 2", n, err)
		}
	}
	w1.Close()
	w1.Close()
	if set.Len() != 1 {
		t.Errorf("after a close, len %d, want 1", set.Len())
	}
	w2.Close()
	if set.Len() != 0 {
		t.Errorf("after both closed, len %d", set.Len())
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if _, err := Read(p1); !errors.Is(err, ErrUnavailable) {
		t.Errorf("read a pipe: %v, want ErrUnavailable", err)
	}
}

// TestSum: counters add, round trips average, minima take the least.
func TestSum(t *testing.T) {
	ms := time.Millisecond
	got := Sum([]Info{
		{RTT: 80 * ms, MinRTT: 79 * ms, Retransmits: 1, SegmentsOut: 100, InFlight: 1000, DeliveryRate: 10},
		{RTT: 100 * ms, MinRTT: 81 * ms, Retransmits: 3, SegmentsOut: 300, InFlight: 500, DeliveryRate: 5},
		{},
	})
	want := Info{RTT: 90 * ms, MinRTT: 79 * ms, Retransmits: 4, SegmentsOut: 400, InFlight: 1500, DeliveryRate: 15}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if l := got.Loss(); l != 0.01 {
		t.Errorf("loss %v, want 0.01", l)
	}
}

// TestEncodeParse: Parse reads Encode's form back, skips fields it does
// not know and refuses malformed ones.
func TestEncodeParse(t *testing.T) {
	in := Info{RTT: 80123 * time.Microsecond, RTTVar: 500 * time.Microsecond, MinRTT: 80 * time.Millisecond, RcvRTT: 81 * time.Millisecond,
		Retransmits: 7, SegmentsOut: 12345, InFlight: 5 << 20, BytesSent: 1 << 40, BytesAcked: 1<<40 - 5<<20, BytesReceived: 99,
		DeliveryRate: 62500000, Cwnd: 3000, MSS: 1448}
	got, err := Parse(in.Encode() + " future=1")
	if err != nil || got != in {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, in)
	}
	for _, bad := range []string{"rtt_us", "rtt_us=-1", "retrans=x", strings.Repeat("a=1 ", 300)} {
		if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%.20q): %v, want ErrMalformed", bad, err)
		}
	}
}

// FuzzParseTCPInfo: no input makes Parse panic, and what it accepts encodes to
// a form it reads back the same.
func FuzzParseTCPInfo(f *testing.F) {
	f.Add(Info{RTT: time.Millisecond, Retransmits: 1, SegmentsOut: 2, InFlight: 3}.Encode())
	f.Add("rtt_us=18446744073709551615 cwnd=99999999999")
	f.Add("delivery=9223372036854775807")
	f.Fuzz(func(t *testing.T, s string) {
		i, err := Parse(s)
		if err != nil {
			return
		}
		j, err := Parse(i.Encode())
		if err != nil || j != i {
			t.Errorf("%q: %+v re-encoded reads %+v, %v", s, i, j, err)
		}
	})
}
