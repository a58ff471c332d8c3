package computeagent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// pusher is a storage agent that answers a Fetch stream with 64 KiB
// responses as fast as flow control lets it, asked or not, and counts the
// bytes it handed to gRPC.
type pusher struct {
	dataplanepb.UnimplementedStorageServer
	sent atomic.Int64
}

func (p *pusher) Fetch(s dataplanepb.Storage_FetchServer) error {
	msg := &dataplanepb.FetchResponse{Data: make([]byte, 64<<10)}
	for {
		if err := s.Send(msg); err != nil {
			return err
		}
		p.sent.Add(int64(len(msg.Data)))
	}
}

// settled waits until v has not moved for a second (long enough that a
// loaded machine's scheduling pauses do not pass for flow control) and
// returns it.
func settled(t *testing.T, v *atomic.Int64) int64 {
	t.Helper()
	last, still := v.Load(), 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if now := v.Load(); now != last {
			last, still = now, 0
		} else if still++; still == 50 {
			return last
		}
	}
	t.Fatalf("still sending after 20 s: %d bytes", last)
	return 0
}

// TestRecvWindow: Config.RecvWindow is how far a storage agent may send
// ahead of a compute agent that reads nothing (the agent's connections
// carry it); zero leaves grpc's own window of a few 64 KiB.
func TestRecvWindow(t *testing.T) {
	for _, tc := range []struct {
		window   int
		min, max int64
	}{
		// grpc's 64 KiB window, its write quota and bufconn's 1 MiB.
		{0, 0, 1 << 20},
		{4 << 20, 4 << 20, 5 << 20},
	} {
		n := &enginetest.MemNet{}
		p := &pusher{}
		n.Serve(t, "s1:1", p)
		cfg, _ := testConfig(t, n, "s1:1")
		cfg.RecvWindow = tc.window
		a, err := cfg.new()
		if err != nil {
			t.Fatal(err)
		}
		c, err := a.conn("s1:1", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := dataplanepb.NewStorageClient(c).Fetch(ctx); err != nil {
			t.Fatal(err)
		}
		got := settled(t, &p.sent)
		t.Logf("window %d: %d bytes sent ahead", tc.window, got)
		if got < tc.min || got > tc.max {
			t.Errorf("window %d: the storage agent sent %d bytes ahead, want %d to %d", tc.window, got, tc.min, tc.max)
		}
		cancel()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
