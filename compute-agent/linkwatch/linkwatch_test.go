package linkwatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

const ms = time.Millisecond

// fakeStorage answers Info with a header (nil: none), after delay on the
// test's clock, or fails.
type fakeStorage struct {
	dataplanepb.StorageClient
	header *tcpinfo.Info
	fail   bool
	clock  *time.Time
	delay  time.Duration
}

func (f *fakeStorage) Info(_ context.Context, _ *dataplanepb.InfoRequest, opts ...grpc.CallOption) (*dataplanepb.InfoResponse, error) {
	if f.fail {
		return nil, errors.New("down")
	}
	*f.clock = f.clock.Add(f.delay)
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok && f.header != nil {
			*h.HeaderAddr = metadata.Pairs(tcpinfo.Header, f.header.Encode())
		}
	}
	return &dataplanepb.InfoResponse{}, nil
}

// TestRead: the storage end's round trip wins over the Info call's; the
// call's time stands in without a header; a failed call leaves nothing.
func TestRead(t *testing.T) {
	clock := time.Unix(0, 0)
	now := func() time.Time { return clock }
	remote := tcpinfo.Info{RTT: 82 * ms, MinRTT: 80 * ms, Retransmits: 10, SegmentsOut: 1000, InFlight: 4 << 20}
	f := &fakeStorage{header: &remote, clock: &clock, delay: 85 * ms}
	r := Read(context.Background(), Peer{Client: f}, now)
	if d, from := r.RTT(); d != 82*ms || from != FromStorage || r.MinRTT() != 80*ms || r.RPC != 85*ms {
		t.Errorf("with the header: rtt %v from %s, min %v, rpc %v", d, from, r.MinRTT(), r.RPC)
	}
	if b, ok := r.InFlight(); !ok || b != 4<<20 {
		t.Errorf("in flight %d %v", b, ok)
	}
	f.header = nil
	r = Read(context.Background(), Peer{Client: f}, now)
	if d, from := r.RTT(); d != 85*ms || from != FromRPC || r.MinRTT() != 85*ms {
		t.Errorf("without the header: rtt %v from %s, min %v", d, from, r.MinRTT())
	}
	if _, ok := r.InFlight(); ok {
		t.Error("in flight known without the header")
	}
	f.fail = true
	if d, from := Read(context.Background(), Peer{Client: f}, now).RTT(); d != 0 || from != "" {
		t.Errorf("failed call: rtt %v from %q, want none", d, from)
	}
}

// TestBetweenAndCombine: the loss is the storage end's retransmits over
// its segments between two readings; peers combine by mean round trip,
// least minimum and the sum of their segments.
func TestBetweenAndCombine(t *testing.T) {
	a := Reading{Remote: tcpinfo.Info{RTT: 80 * ms, MinRTT: 80 * ms, Retransmits: 5, SegmentsOut: 100}, RemoteOK: true, RPC: 90 * ms}
	b := Reading{Remote: tcpinfo.Info{RTT: 100 * ms, MinRTT: 79 * ms, Retransmits: 15, SegmentsOut: 10100}, RemoteOK: true, RPC: 120 * ms}
	s := Between(a, b)
	if s.RTT != 100*ms || s.MinRTT != 79*ms || s.From != FromStorage || !s.LossKnown || s.Loss() != 0.001 {
		t.Errorf("between: %+v loss %v", s, s.Loss())
	}
	rpcOnly := Between(Reading{RPC: 30 * ms}, Reading{RPC: 50 * ms})
	if rpcOnly.RTT != 50*ms || rpcOnly.MinRTT != 30*ms || rpcOnly.LossKnown {
		t.Errorf("rpc only: %+v", rpcOnly)
	}
	c := Combine([]Span{s, rpcOnly})
	if c.RTT != 75*ms || c.MinRTT != 30*ms || c.LossKnown || c.SegmentsOut != 10000 {
		t.Errorf("combined: %+v", c)
	}
	if c := Combine([]Span{s, s}); !c.LossKnown || c.Loss() != 0.001 {
		t.Errorf("combined loss %v known %v", c.Loss(), c.LossKnown)
	}
}

// TestStats: mean and least round trip, mean and peak bytes in flight,
// loss from the first reading to the last.
func TestStats(t *testing.T) {
	var s Stats
	if _, _, ok := s.InFlight(); ok || s.Span() != (Span{}) {
		t.Error("empty stats report something")
	}
	for i, rtt := range []time.Duration{80 * ms, 90 * ms, 100 * ms} {
		s.Add(Reading{Remote: tcpinfo.Info{RTT: rtt, MinRTT: rtt - ms, InFlight: int64(i+1) << 20, Retransmits: uint64(i), SegmentsOut: uint64(1000 * i)}, RemoteOK: true})
	}
	if d, from := s.RTT(); d != 90*ms || from != FromStorage || s.MinRTT() != 79*ms {
		t.Errorf("rtt %v from %s min %v", d, from, s.MinRTT())
	}
	if mean, peak, ok := s.InFlight(); !ok || mean != 2<<20 || peak != 3<<20 {
		t.Errorf("in flight mean %d peak %d", mean, peak)
	}
	if sp := s.Span(); sp.RTT != 90*ms || sp.Loss() != 0.001 || s.Readings() != 3 {
		t.Errorf("span %+v loss %v", sp, sp.Loss())
	}
}

// TestStatsDelivery: the storage end's latest delivery rate, kept
// through readings without it.
func TestStatsDelivery(t *testing.T) {
	var s Stats
	if s.Delivery() != 0 {
		t.Error("empty stats have a delivery rate")
	}
	s.Add(Reading{Remote: tcpinfo.Info{DeliveryRate: 12e6}, RemoteOK: true})
	s.Add(Reading{Remote: tcpinfo.Info{DeliveryRate: 6e6}, RemoteOK: true})
	s.Add(Reading{LocalOK: true, Local: tcpinfo.Info{DeliveryRate: 1}})
	s.Add(Reading{Remote: tcpinfo.Info{}, RemoteOK: true})
	if got := s.Delivery(); got != 6e6 {
		t.Errorf("delivery %.0f B/s, want the last the storage end told, 6000000", got)
	}
}
