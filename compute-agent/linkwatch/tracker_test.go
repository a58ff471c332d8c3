package linkwatch

import (
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/tcpinfo"
)

// TestTracker: the rate is the most delivered between two readings (or
// the seed, whichever is more), the round trip the least seen and its
// mean, both kept in the memory for the next epoch; the window's peak
// bytes reach the report.
func TestTracker(t *testing.T) {
	var tr Tracker
	if tr.Report() != nil || tr.RTT() != 0 {
		t.Fatal("an unread tracker reports a link")
	}
	var mem Memory
	t0 := time.Unix(100, 0)
	read := func(rtt time.Duration) Reading {
		return Reading{Remote: tcpinfo.Info{RTT: rtt, MinRTT: rtt}, RemoteOK: true}
	}
	if rate := tr.Add(read(80*ms), t0, 1<<20, 0, &mem); rate != 0 {
		t.Errorf("first reading: rate %v, want 0 (no interval yet)", rate)
	}
	if rate := tr.Add(read(100*ms), t0.Add(time.Second), 3<<20, 10e6, &mem); rate != 10e6 {
		t.Errorf("second reading: rate %v, want 10e6", rate)
	}
	if rate := tr.Add(read(90*ms), t0.Add(2*time.Second), 2<<20, 15e6, &mem); rate != 10e6 {
		t.Errorf("a slower interval: rate %v, want the peak 10e6", rate)
	}
	if tr.RTT() != 80*ms || tr.MeanRTT() != 90*ms {
		t.Errorf("rtt %v mean %v, want 80ms, 90ms", tr.RTT(), tr.MeanRTT())
	}
	if rate, rtt := mem.Load(); rate != 10e6 || rtt != 80*ms {
		t.Errorf("memory %v %v, want 10e6 80ms", rate, rtt)
	}
	if got, want := tr.BDP(10e6), int64(BDPFactor*10e6*0.080); got != want {
		t.Errorf("bdp %d, want %d", got, want)
	}
	if r := tr.Report(); r == nil || r.WindowPeakBytes != 3<<20 || r.Readings != 3 || r.MinRTTSeconds != 0.080 {
		t.Errorf("report %+v", r)
	}

	var next Tracker
	if rate, ok := next.Seed(&mem); !ok || rate != 10e6 || next.RTT() != 80*ms || next.MeanRTT() != 80*ms {
		t.Errorf("seeded: rate %v ok %v rtt %v mean %v", rate, ok, next.RTT(), next.MeanRTT())
	}
	if rate := next.Add(read(80*ms), t0, 0, 0, nil); rate != 10e6 {
		t.Errorf("seeded tracker's rate %v, want the seed", rate)
	}
	if _, ok := new(Tracker).Seed(&Memory{}); ok {
		t.Error("seeded from an empty memory")
	}
	if _, ok := new(Tracker).Seed(nil); ok {
		t.Error("seeded from no memory")
	}
}

// TestRecvWindowShort: a stream window below one bandwidth-delay product
// is short once per tracker; grpc's own window (0) never is.
func TestRecvWindowShort(t *testing.T) {
	var tr Tracker
	tr.Add(Reading{RPC: 100 * ms}, time.Unix(0, 0), 0, 0, nil)
	if bdp, short := tr.RecvWindowShort(0, 10e6); short || bdp != 1e6 {
		t.Errorf("grpc's window: bdp %d short %v, want 1e6 false", bdp, short)
	}
	if _, short := tr.RecvWindowShort(2e6, 10e6); short {
		t.Error("a window over the product is short")
	}
	if bdp, short := tr.RecvWindowShort(64<<10, 10e6); !short || bdp != 1e6 {
		t.Errorf("64 KiB window: bdp %d short %v, want 1e6 true", bdp, short)
	}
	if _, short := tr.RecvWindowShort(64<<10, 10e6); short {
		t.Error("short twice")
	}
}
