package netns

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/testbed/shape"
)

// transfer sends size bytes from the storage node to the compute node of
// topo and returns the seconds it took.
func transfer(t *testing.T, topo *Topology, size int) float64 {
	t.Helper()
	s, c := topo.Storage[0], topo.Compute[0]
	lis, err := s.Listen("tcp", net.JoinHostPort(s.IP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Write(make([]byte, size))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := c.Dial(ctx, "tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if n, err := io.Copy(io.Discard, conn); n != int64(size) || err != nil {
		t.Fatalf("%d bytes, %v; want %d", n, err, size)
	}
	return time.Since(start).Seconds()
}

// fastest is the least of n transfers of size bytes (transfer): the one a
// busy machine disturbed least. On the delay line every packet crosses
// user space, and under make test's load one transfer of 1 MiB at 80
// Mbit/s took 0.62 s where the same transfer had taken 0.17 s (2026-11-30).
func fastest(t *testing.T, topo *Topology, size, n int) float64 {
	t.Helper()
	best := transfer(t, topo, size)
	for range n - 1 {
		best = min(best, transfer(t, topo, size))
	}
	return best
}

// TestSetRate: SetRate changes the rate of both ends of a shaped link in
// place, on a veth pair and on the delay line's TUN devices: tc shows the
// new rate, and the same transfer at a quarter of the rate takes much
// longer (the assertion leaves room for a busy machine: more than twice,
// ideally four times), and back at the first rate about as long as
// before. Each rate's time is the fastest of three transfers (fastest).
func TestSetRate(t *testing.T) {
	fast, slow := shape.MustParseRate("80mbit"), shape.MustParseRate("20mbit")
	for _, wan := range []bool{false, true} {
		cfg := Config{Prefix: ProcessPrefix() + "x", Rate: fast}
		var p *Pair
		if wan {
			cfg.RTT = 2 * time.Millisecond
			p = wanPair(t, cfg)
		} else {
			p = setup(t, cfg)
		}
		topo := p.Topology()
		const size = 1 << 20
		before := fastest(t, topo, size, 3)
		if err := topo.SetRate(context.Background(), slow); err != nil {
			t.Fatal(err)
		}
		for _, n := range topo.Nodes() {
			out, err := output(context.Background(), "tc", "-n", n.NS, "qdisc", "show", "dev", n.Dev)
			if got := tbfRate(out); err != nil || got != slow.Bits() {
				t.Errorf("wan %t: %s in %s: tbf rate %v (%v), want %v", wan, n.Dev, n.NS, got, err, slow.Bits())
			}
		}
		during := fastest(t, topo, size, 3)
		if err := topo.SetRate(context.Background(), fast); err != nil {
			t.Fatal(err)
		}
		after := fastest(t, topo, size, 3)
		t.Logf("wan %t: 1 MiB at %s %.3f s, at %s %.3f s, back at %s %.3f s", wan, fast, before, slow, during, fast, after)
		if during < 2*before || during < 2*after {
			t.Errorf("wan %t: at a quarter of the rate %.3f s, at the rate %.3f s and %.3f s: want over twice as long", wan, during, before, after)
		}
		if err := topo.SetRate(context.Background(), shape.Rate{}); err == nil {
			t.Errorf("the zero rate was taken")
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
