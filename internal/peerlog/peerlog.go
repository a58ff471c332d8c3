// Package peerlog rate-limits the log lines a remote peer can cause, so
// that whoever reaches a port cannot flood the agents' logs: failed TLS
// handshakes, refused streams and requests, rejected gossip, bad trainer
// frames, stray responses.
//
// A [Limiter] keeps a token bucket per reason (a short stable string such
// as [TLSHandshakeRejected]): the first Burst events of a reason are
// logged, then at most one per Every, and the bucket refills at that rate
// while the reason is quiet. A line logged after some were dropped carries
// dropped=N, the lines of that reason dropped since the previous one.
// Every event, logged or not, increments sophon_peer_warnings_total{reason};
// the dropped ones also sophon_peer_warnings_dropped_total{reason}, so the
// counters hold the whole count while the log holds a sample.
package peerlog

import (
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
	DefaultBurst = 10
	DefaultEvery = 10 * time.Second
)

// Options configure a [Limiter]. Zero fields take the defaults noted.
type Options struct {
	// Burst is how many lines of one reason are logged before the rate
	// applies. Zero means DefaultBurst.
	Burst int
	// Every is the interval of the lines of one reason past the burst.
	// Zero means DefaultEvery.
	Every time.Duration
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Limiter rate-limits log lines per reason. Its methods are safe for
// concurrent use; a nil *Limiter logs every line and counts nothing.
type Limiter struct {
	burst   int
	every   time.Duration
	now     func() time.Time
	total   *prometheus.CounterVec
	dropped *prometheus.CounterVec

	mu      sync.Mutex
	reasons map[string]*bucket
}

// bucket is one reason's state.
type bucket struct {
	// tat is the theoretical arrival time of the generic cell rate
	// algorithm: an event at now is logged when tat-now <= (burst-1)*every,
	// and then tat = max(tat, now) + every.
	tat         time.Time
	dropped     int // lines dropped since the last one logged
	total, drop prometheus.Counter
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
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Limiter{
		burst:   o.Burst,
		every:   o.Every,
		now:     o.Now,
		total:   metricsrv.CounterVec("sophon_peer_warnings_total", "Log events a remote peer caused, by reason, logged or not (the log is rate-limited per reason).", "reason"),
		dropped: metricsrv.CounterVec("sophon_peer_warnings_dropped_total", "Log events a remote peer caused that the per-reason rate limit kept out of the log, by reason.", "reason"),
		reasons: map[string]*bucket{},
	}
	for _, r := range Reasons {
		l.bucketLocked(r)
	}
	return l
}

// Collectors are the limiter's counters, for the agent's registry.
func (l *Limiter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.total, l.dropped}
}

// Warn counts an event of reason and returns a warn-level event of log
// carrying reason (and dropped=N when lines were dropped since the last
// one), or nil when the line is dropped: zerolog's methods do nothing on a
// nil event, so the caller writes
//
//	lim.Warn(log, peerlog.FetchStreamRefused).Str("peer", p).Err(err).Msg("fetch stream refused")
//
// and builds nothing when the line is dropped. NB: reason must be a
// constant of the code, never a string from the peer: each reason holds a
// bucket and two series for good.
func (l *Limiter) Warn(log zerolog.Logger, reason string) *zerolog.Event {
	if l == nil {
		return log.Warn().Str("peer_event", reason)
	}
	n, ok := l.allow(reason)
	if !ok {
		return nil
	}
	ev := log.Warn().Str("peer_event", reason)
	if n > 0 {
		ev = ev.Int("dropped", n)
	}
	return ev
}

// allow counts an event of reason and reports whether to log it, with the
// lines dropped since the last one logged.
func (l *Limiter) allow(reason string) (dropped int, ok bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketLocked(reason)
	b.total.Inc()
	if b.tat.Before(now) {
		b.tat = now
	}
	if b.tat.Sub(now) > time.Duration(l.burst-1)*l.every {
		b.dropped++
		b.drop.Inc()
		return 0, false
	}
	b.tat = b.tat.Add(l.every)
	dropped, b.dropped = b.dropped, 0
	return dropped, true
}

// bucketLocked is reason's bucket, made on its first event; l.mu is held
// (or l is not shared yet).
func (l *Limiter) bucketLocked(reason string) *bucket {
	b := l.reasons[reason]
	if b == nil {
		b = &bucket{total: l.total.WithLabelValues(reason), drop: l.dropped.WithLabelValues(reason)}
		l.reasons[reason] = b
	}
	return b
}
