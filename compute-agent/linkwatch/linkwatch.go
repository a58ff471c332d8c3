// Package linkwatch reads the link between the compute agent and a
// storage agent: its round trip, the loss of the data's direction and the
// bytes in flight, from TCP_INFO at both ends (this agent's sockets, and
// the storage agent's end as its Info call's header tells it,
// tcpinfo.Header), with a timed Info call where neither is available.
// Stage 1 reads it before and after its link probe (Between), the engine
// through every epoch (Watch; Tracker: the readings, the peak rate and the
// round trip of one agent's link); and the pure rules the engine follows
// from it: the fetch window by bandwidth x round trip (WindowCount,
// BDPFactor), the bytes of several agents' paced windows (PaceBytes) and
// the bounds of a mixed plan's two lanes (RawFlight, CPULead), deadlines
// that count the round trip (CountRTT), the link carried from one epoch
// to the next (Memory), several agents' links together (Total), the
// connections a lossy path needs (AutoConns) and a window's share of
// each (Stripes, Share).
package linkwatch

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Peer is a storage agent as the link is read: its client, and the
// sockets of the connection to it (nil: unknown, an in-memory connection).
type Peer struct {
	Client dataplanepb.StorageClient
	TCP    *tcpinfo.Conns
}

// Where a round trip came from (Span.From).
const (
	FromStorage = "storage_tcp_info" // the storage agent's end: the data's sender
	FromCompute = "compute_tcp_info" // this agent's sockets
	FromRPC     = "info_rpc"         // a timed Info call
)

// Reading is one reading of the link to a peer.
type Reading struct {
	// Local is this agent's end (LocalOK: read), Remote the storage
	// agent's (RemoteOK: its Info sent the header).
	Local, Remote     tcpinfo.Info
	LocalOK, RemoteOK bool
	// RPC is how long the Info call took (0: it failed).
	RPC time.Duration
}

// Read reads the link to p: its sockets' TCP_INFO, then an Info call,
// timed, whose header carries the storage agent's. The call is bounded
// by ctx; when it fails the reading has the local end only.
func Read(ctx context.Context, p Peer, now func() time.Time) Reading {
	var r Reading
	if p.TCP != nil {
		if i, _, err := p.TCP.Read(); err == nil {
			r.Local, r.LocalOK = i, true
		}
	}
	if p.Client == nil {
		return r
	}
	var md metadata.MD
	t0 := now()
	if _, err := p.Client.Info(ctx, &dataplanepb.InfoRequest{}, grpc.Header(&md)); err != nil {
		return r
	}
	r.RPC = max(now().Sub(t0), time.Nanosecond)
	if v := md.Get(tcpinfo.Header); len(v) == 1 {
		if i, err := tcpinfo.Parse(v[0]); err == nil {
			r.Remote, r.RemoteOK = i, true
		}
	}
	return r
}

// RTT is the reading's round trip and where it came from: the storage
// end's smoothed round trip (the data's sender measures it on the data),
// else this end's, else the Info call's time; 0 and "" when none.
func (r Reading) RTT() (time.Duration, string) {
	switch {
	case r.RemoteOK && r.Remote.RTT > 0:
		return r.Remote.RTT, FromStorage
	case r.LocalOK && r.Local.RTT > 0:
		return r.Local.RTT, FromCompute
	case r.RPC > 0:
		return r.RPC, FromRPC
	}
	return 0, ""
}

// MinRTT is the least round trip the kernel saw at either end (the path's
// own, without its queues), else RTT.
func (r Reading) MinRTT() time.Duration {
	var m time.Duration
	for _, i := range []struct {
		ok bool
		d  time.Duration
	}{{r.RemoteOK, r.Remote.MinRTT}, {r.LocalOK, r.Local.MinRTT}} {
		if i.ok && i.d > 0 && (m == 0 || i.d < m) {
			m = i.d
		}
	}
	if m == 0 {
		m, _ = r.RTT()
	}
	return m
}

// InFlight is the bytes the storage agent sent that are not yet
// acknowledged (its end's TCP_INFO); ok is false without its header.
func (r Reading) InFlight() (int64, bool) { return r.Remote.InFlight, r.RemoteOK }

// Span is what the link did between two readings of one or more peers.
type Span struct {
	// RTT is the round trip at the end (Reading.RTT), MinRTT the least.
	RTT, MinRTT time.Duration
	// From says where RTT came from (FromStorage, FromCompute, FromRPC;
	// "" when unknown).
	From string
	// Retransmits and SegmentsOut are the storage agents' segments sent
	// again and sent in the span; LossKnown is false when a storage agent
	// sent no header (then Loss is 0).
	Retransmits, SegmentsOut uint64
	LossKnown                bool
}

// Loss is the share of the storage agents' segments sent again.
func (s Span) Loss() float64 {
	if s.SegmentsOut == 0 {
		return 0
	}
	return float64(s.Retransmits) / float64(s.SegmentsOut)
}

// Between is the span from reading a to reading b of one peer.
func Between(a, b Reading) Span {
	var s Span
	s.RTT, s.From = b.RTT()
	s.MinRTT = b.MinRTT()
	if a.RPC > 0 && (s.MinRTT == 0 || (s.From == FromRPC && a.RPC < s.MinRTT)) {
		s.MinRTT = a.RPC
	}
	if a.RemoteOK && b.RemoteOK {
		d := b.Remote.Sub(a.Remote)
		s.Retransmits, s.SegmentsOut, s.LossKnown = d.Retransmits, d.SegmentsOut, true
	}
	return s
}

// Combine is the spans of several peers together: the mean round trip of
// those that have one, the least minimum, the loss of all their segments
// (known only when every peer's is), From the first's.
func Combine(spans []Span) Span {
	var c Span
	var sum time.Duration
	n := 0
	c.LossKnown = len(spans) > 0
	for _, s := range spans {
		if s.RTT > 0 {
			sum += s.RTT
			n++
			if c.From == "" {
				c.From = s.From
			}
		}
		if s.MinRTT > 0 && (c.MinRTT == 0 || s.MinRTT < c.MinRTT) {
			c.MinRTT = s.MinRTT
		}
		c.Retransmits += s.Retransmits
		c.SegmentsOut += s.SegmentsOut
		c.LossKnown = c.LossKnown && s.LossKnown
	}
	if n > 0 {
		c.RTT = sum / time.Duration(n)
	}
	return c
}

// Report is s as the report carries it (its engine fields left zero).
func (s Span) Report() *report.Link {
	return &report.Link{
		RTTSeconds: s.RTT.Seconds(), MinRTTSeconds: s.MinRTT.Seconds(), RTTFrom: s.From,
		Retransmits: s.Retransmits, SegmentsOut: s.SegmentsOut, Loss: s.Loss(), LossKnown: s.LossKnown,
	}
}
