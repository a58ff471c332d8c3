// Package peerlog rate-limits the log lines a remote peer can cause, so
// that whoever reaches a port cannot flood the agents' logs: failed TLS
// handshakes, refused streams and requests, rejected gossip, bad trainer
// frames, stray responses.
//
// A [Limiter] keeps a token bucket per peer and reason (a short stable
// string such as [TLSHandshakeRejected]): the first Burst events of a
// peer's reason are logged, then at most one per Every, and the bucket
// refills at that rate while the peer is quiet. So one noisy peer spends
// its own burst, never another's: the first line a second peer causes is
// logged while the first is being dropped. A peer is its host (the port
// of a host:port is dropped, so that reconnecting from new ports does not
// buy new bursts); the Limiter tracks at most MaxPeers of them, forgetting
// the least recently seen, so its memory is bounded however many peers
// come. Above the peers, each reason has a total bucket, PeerShare times
// the burst and the rate, so that many peers at once (an address range)
// cannot flood the log either. A line logged after some were dropped
// carries dropped=N, the lines of that peer and reason dropped since the
// previous one. Every event, logged or not, increments
// sophon_peer_warnings_total{reason}; the dropped ones also
// sophon_peer_warnings_dropped_total{reason}, so the counters hold the
// whole count while the log holds a sample.
package peerlog

import (
	"container/list"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/metricsrv"
)

// The reasons the agents log through a Limiter: the label values of the
// counters.
const (
	// TLSHandshakeRejected: a TLS handshake failed (a plaintext client, no,
	// an untrusted or a wrong certificate), on either side.
	TLSHandshakeRejected = "tls_handshake_rejected"
	// FetchStreamRefused: a Fetch stream past the agent's or the peer's
	// stream limit.
	FetchStreamRefused = "fetch_stream_refused"
	// BadRequest: a fetch request the storage agent refused as invalid
	// (split out of range, unknown or unregistered pipeline, bad spec).
	BadRequest = "bad_request"
	// GossipRejected: gossip with another cluster's label or none, or that
	// the cluster's key does not decrypt.
	GossipRejected = "gossip_rejected"
	// MetricsHTTPError: an error the metrics listener's HTTP server logs.
	MetricsHTTPError = "metrics_http_error"
	// TrainerRefused: a trainer connection that sent no HELLO, a refused
	// HELLO or a bad frame.
	TrainerRefused = "trainer_refused"
	// UnknownResponse: a storage agent's response for a tag the compute
	// agent is not waiting for.
	UnknownResponse = "unknown_response"
)

// Reasons are the reasons above; [New] creates their series, so that
// /metrics shows them at zero.
var Reasons = []string{TLSHandshakeRejected, FetchStreamRefused, BadRequest, GossipRejected, MetricsHTTPError, TrainerRefused, UnknownResponse}

// Defaults of [Options].
const (
	DefaultBurst    = 10
	DefaultEvery    = 10 * time.Second
	DefaultMaxPeers = 1024
	// PeerShare is how many peers' worth of lines a reason logs in all:
	// its total bucket holds PeerShare x Burst lines and refills
	// PeerShare times as fast as a peer's.
	PeerShare = 10
)

// Options configure a [Limiter]. Zero fields take the defaults noted.
type Options struct {
	// Burst is how many lines of one peer and reason are logged before the
	// rate applies. Zero means DefaultBurst.
	Burst int
	// Every is the interval of the lines of one peer and reason past the
	// burst. Zero means DefaultEvery.
	Every time.Duration
	// MaxPeers bounds the peers tracked: past it the least recently seen
	// is forgotten (and gets a full burst if it comes back). Zero means
	// DefaultMaxPeers.
	MaxPeers int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Limiter rate-limits log lines per peer and reason. Its methods are safe
// for concurrent use; a nil *Limiter logs every line and counts nothing.
type Limiter struct {
	burst    int
	every    time.Duration
	maxPeers int
	now      func() time.Time
	total    *prometheus.CounterVec
	dropped  *prometheus.CounterVec

	mu      sync.Mutex
	reasons map[string]*reasonState
	peers   map[string]*list.Element // of *peerState, in lru
	lru     list.List                // most recently seen first
}

// reasonState is one reason's counters and its total bucket.
type reasonState struct {
	all         gcra
	total, drop prometheus.Counter
}

// peerState is one peer's buckets, by reason.
type peerState struct {
	peer    string
	reasons map[string]*gcra
}

// gcra is a token bucket kept as the theoretical arrival time of the
// generic cell rate algorithm: an event at now is allowed when
// tat-now <= (burst-1)*every, and then tat = max(tat, now) + every.
type gcra struct {
	tat     time.Time
	dropped int // events refused since the last one allowed
}

// allow reports whether an event at now passes a bucket of burst and
// every, and takes its token when it does.
func (b *gcra) allow(now time.Time, burst int, every time.Duration) bool {
	if b.tat.Before(now) {
		b.tat = now
	}
	if b.tat.Sub(now) > time.Duration(burst-1)*every {
		return false
	}
	b.tat = b.tat.Add(every)
	return true
}

// New returns a Limiter; register its [Limiter.Collectors] with the
// agent's registry.
func New(o Options) *Limiter {
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.MaxPeers <= 0 {
		o.MaxPeers = DefaultMaxPeers
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Limiter{
		burst:    o.Burst,
		every:    o.Every,
		maxPeers: o.MaxPeers,
		now:      o.Now,
		total:    metricsrv.CounterVec("sophon_peer_warnings_total", "Log events a remote peer caused, by reason, logged or not (the log is rate-limited per peer and reason).", "reason"),
		dropped:  metricsrv.CounterVec("sophon_peer_warnings_dropped_total", "Log events a remote peer caused that the rate limit (per peer and reason, and per reason in all) kept out of the log, by reason.", "reason"),
		reasons:  map[string]*reasonState{},
		peers:    map[string]*list.Element{},
	}
	for _, r := range Reasons {
		l.reasonLocked(r)
	}
	return l
}

// Collectors are the limiter's counters, for the agent's registry.
func (l *Limiter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.total, l.dropped}
}

// Warn is WarnPeer for an event whose peer is not known: all such events
// share one peer's buckets.
func (l *Limiter) Warn(log zerolog.Logger, reason string) *zerolog.Event {
	return l.WarnPeer(log, reason, "")
}

// WarnPeer counts an event of reason caused by peer (an address, host:port
// or host, or a name) and returns a warn-level event of log carrying reason
// (and dropped=N when lines of that peer and reason were dropped since its
// last one), or nil when the line is dropped: zerolog's methods do nothing
// on a nil event, so the caller writes
//
//	lim.WarnPeer(log, peerlog.FetchStreamRefused, p).Str("peer", p).Err(err).Msg("fetch stream refused")
//
// and builds nothing when the line is dropped. The caller names the peer
// in the line as it sees fit; WarnPeer adds no peer field. NB: reason must
// be a constant of the code, never a string from the peer: each reason
// holds two series for good.
func (l *Limiter) WarnPeer(log zerolog.Logger, reason, peer string) *zerolog.Event {
	if l == nil {
		return log.Warn().Str("peer_event", reason)
	}
	n, ok := l.allow(reason, hostOf(peer))
	if !ok {
		return nil
	}
	ev := log.Warn().Str("peer_event", reason)
	if n > 0 {
		ev = ev.Int("dropped", n)
	}
	return ev
}

// allow counts an event of reason from peer and reports whether to log it,
// with the lines of peer and reason dropped since the last one logged.
func (l *Limiter) allow(reason, peer string) (dropped int, ok bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.reasonLocked(reason)
	r.total.Inc()
	b := l.peerLocked(peer, reason)
	// NB: the peer's own bucket first, so that a peer past its burst does
	// not spend the reason's total, which the other peers share.
	if !b.allow(now, l.burst, l.every) || !r.all.allow(now, PeerShare*l.burst, l.every/PeerShare) {
		b.dropped++
		r.drop.Inc()
		return 0, false
	}
	dropped, b.dropped = b.dropped, 0
	return dropped, true
}

// reasonLocked is reason's state, made on its first event; l.mu is held
// (or l is not shared yet).
func (l *Limiter) reasonLocked(reason string) *reasonState {
	r := l.reasons[reason]
	if r == nil {
		r = &reasonState{total: l.total.WithLabelValues(reason), drop: l.dropped.WithLabelValues(reason)}
		l.reasons[reason] = r
	}
	return r
}

// peerLocked is peer's bucket of reason, made on its first event, and
// marks peer the most recently seen, forgetting the least recently seen
// past maxPeers; l.mu is held.
func (l *Limiter) peerLocked(peer, reason string) *gcra {
	e := l.peers[peer]
	if e != nil {
		l.lru.MoveToFront(e)
	} else {
		if l.lru.Len() >= l.maxPeers {
			old := l.lru.Back()
			l.lru.Remove(old)
			delete(l.peers, old.Value.(*peerState).peer)
		}
		e = l.lru.PushFront(&peerState{peer: peer, reasons: map[string]*gcra{}})
		l.peers[peer] = e
	}
	ps := e.Value.(*peerState)
	b := ps.reasons[reason]
	if b == nil {
		b = &gcra{}
		ps.reasons[reason] = b
	}
	return b
}

// trackedPeers is how many peers l holds buckets for.
func (l *Limiter) trackedPeers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// hostOf is peer without its port: "10.0.0.1:5000" and "[::1]:80" give
// "10.0.0.1" and "::1"; anything else (a bare host or IPv6 address, a
// name) is kept as it is. It allocates nothing.
func hostOf(peer string) string {
	i := strings.LastIndexByte(peer, ':')
	if i < 0 || i == len(peer)-1 {
		return peer
	}
	for _, c := range peer[i+1:] {
		if c < '0' || c > '9' {
			return peer
		}
	}
	h := peer[:i]
	if len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	if strings.IndexByte(h, ':') >= 0 {
		return peer // a bare IPv6 address: its last group is not a port
	}
	return h
}
