package computeagent

import (
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestPathMemo: the auto connection count follows the round trip and
// loss last measured: before the loss is measured, the first
// connection's round trip at linkwatch.PriorLoss (one connection on a LAN,
// several on a long path); one on a lossless path, several on a lossy
// long one; a reading without the storage end's loss keeps the loss known
// before, and nil changes nothing.
func TestPathMemo(t *testing.T) {
	a := &Agent{}
	conns := a.epochConns(engine.Opts{LinkRate: 12.5e6})
	info := &dataplanepb.InfoResponse{}
	if n := conns(info, 0); n != 1 {
		t.Fatalf("before any measurement, no round trip: %d connections, want 1", n)
	}
	if n := conns(info, 200*time.Microsecond); n != 1 {
		t.Errorf("before the loss is measured, 0.2 ms: %d connections, want 1", n)
	}
	if n := conns(info, 20*time.Millisecond); n != linkwatch.MaxConns {
		t.Errorf("before the loss is measured, 20 ms, no egress rate announced: %d connections, want %d (0.1%% loss at 1 Gbit/s assumed; the planner's 100 Mbit/s may be one loss-held connection's)", n, linkwatch.MaxConns)
	}
	if n := conns(&dataplanepb.InfoResponse{EgressBytesPerSec: 12.5e6}, 20*time.Millisecond); n != 5 {
		t.Errorf("before the loss is measured, 20 ms, 100 Mbit/s announced: %d connections, want 5", n)
	}
	a.path.note(&report.Link{RTTSeconds: 0.081, MinRTTSeconds: 0.080, RTTFrom: "info_rpc"})
	if n := conns(info, 0); n != 1 {
		t.Errorf("an 80 ms round trip timed by RPC, loss and the kernel's round trip unknown: %d connections, want 1", n)
	}
	if n := conns(info, 80*time.Millisecond); n != linkwatch.MaxConns {
		t.Errorf("the kernel's 80 ms round trip, loss unknown: %d connections, want %d", n, linkwatch.MaxConns)
	}
	a.path.note(&report.Link{RTTSeconds: 0.021, MinRTTSeconds: 0.020, Loss: 0, LossKnown: true})
	if n := conns(info, 20*time.Millisecond); n != 1 {
		t.Errorf("lossless 20 ms path: %d connections, want 1", n)
	}
	a.path.note(&report.Link{RTTSeconds: 0.022, MinRTTSeconds: 0.020, Loss: 0.001, LossKnown: true})
	lossy := conns(info, 20*time.Millisecond)
	// Mathis: 1448 B / 20 ms x 1.22 / sqrt(0.001) = 2.8 MB/s per
	// connection, so 12.5 MB/s wants 5.
	if lossy != 5 {
		t.Errorf("0.1%% loss at 20 ms, 100 Mbit/s: %d connections, want 5", lossy)
	}
	a.path.note(&report.Link{RTTSeconds: 0.080, MinRTTSeconds: 0.080})
	if p := a.path.load(); p.rtt != 80*time.Millisecond || p.loss != 0.001 {
		t.Errorf("after a reading without the storage end: rtt %v loss %v, want 80ms and the loss before (0.001)", p.rtt, p.loss)
	}
	a.path.note(nil)
	if p := a.path.load(); p.rtt != 80*time.Millisecond {
		t.Errorf("nil reading changed the round trip to %v", p.rtt)
	}
	// An epoch that carried 2.5 MB/s over one connection on a 20 ms path
	// at 0.1% loss (its ceiling 2.8 MB/s): loss held it, the link may be
	// faster, so as many connections as allowed; one that carried
	// 12 MB/s over 8 connections (ceiling 22 MB/s) was held by the link,
	// and the next keeps its 8.
	a.path.note(&report.Link{MinRTTSeconds: 0.020, Loss: 0.001, LossKnown: true})
	a.path.noteEpoch(&report.EpochReport{Seconds: 36, BytesReceived: 90e6, ByStorage: []report.StorageStats{{Conns: 1}}})
	if n := conns(info, 20*time.Millisecond); n != linkwatch.MaxConns {
		t.Errorf("after an epoch held by loss: %d connections, want %d", n, linkwatch.MaxConns)
	}
	a.path.noteEpoch(&report.EpochReport{Seconds: 7.5, BytesReceived: 90e6, ByStorage: []report.StorageStats{{Conns: 8}}})
	if n := conns(info, 20*time.Millisecond); n != linkwatch.MaxConns {
		t.Errorf("after an epoch the link held over %d connections: %d, want as many (the planner's rate alone gives %d)", linkwatch.MaxConns, n, lossy)
	}
	a.path.note(&report.Link{MinRTTSeconds: 0.080, Loss: 0, LossKnown: true})
	if n := conns(info, 0); n != linkwatch.MaxConns {
		t.Errorf("after the loss was measured 0 at 80 ms: %d connections, want the %d the link held", n, linkwatch.MaxConns)
	}
	a.cfg.Conns = 3
	if n := conns(info, 20*time.Millisecond); n != 3 {
		t.Errorf("--conns 3: %d connections", n)
	}
}
