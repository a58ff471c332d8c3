package computeagent

import (
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestPathMemo: the auto connection count follows the round trip and
// loss last measured: one connection before any measurement and on a
// lossless path, several on a lossy long one; a reading without the
// storage end's loss keeps the loss known before, and nil changes
// nothing.
func TestPathMemo(t *testing.T) {
	a := &Agent{}
	conns := a.epochConns(engine.Opts{LinkRate: 12.5e6})
	info := &dataplanepb.InfoResponse{}
	if n := conns(info); n != 1 {
		t.Fatalf("before any measurement: %d connections, want 1", n)
	}
	a.path.note(&report.Link{RTTSeconds: 0.021, MinRTTSeconds: 0.020, Loss: 0, LossKnown: true})
	if n := conns(info); n != 1 {
		t.Errorf("lossless 20 ms path: %d connections, want 1", n)
	}
	a.path.note(&report.Link{RTTSeconds: 0.022, MinRTTSeconds: 0.020, Loss: 0.001, LossKnown: true})
	lossy := conns(info)
	// Mathis: 1448 B / 20 ms x 1.22 / sqrt(0.001) = 2.8 MB/s per
	// connection, so 12.5 MB/s wants 5.
	if lossy != 5 {
		t.Errorf("0.1%% loss at 20 ms, 100 Mbit/s: %d connections, want 5", lossy)
	}
	a.path.note(&report.Link{RTTSeconds: 0.080, MinRTTSeconds: 0.080})
	if rtt, loss := a.path.load(); rtt != 80*time.Millisecond || loss != 0.001 {
		t.Errorf("after a reading without the storage end: rtt %v loss %v, want 80ms and the loss before (0.001)", rtt, loss)
	}
	a.path.note(nil)
	if rtt, _ := a.path.load(); rtt != 80*time.Millisecond {
		t.Errorf("nil reading changed the round trip to %v", rtt)
	}
	a.cfg.Conns = 3
	if n := conns(info); n != 3 {
		t.Errorf("--conns 3: %d connections", n)
	}
}
