package linkwatch

import (
	"math"
	"strings"
	"time"
)

// MaxConns bounds the connections per storage agent (the engine's
// Fetcher.Stripe; its Config.Window bounds them too: a stripe holds at
// least one request). The storage agent bounds the Fetch streams of one
// client (its certificate identity, or its IP address without TLS) with
// --max-streams-per-peer, whatever the connections they come on, and its
// fair queue deals a client's streams one client's turn.
const MaxConns = 8

// mss is the TCP payload per segment AutoConns assumes: an Ethernet MTU
// less IPv4, TCP and the timestamp option.
const mss = 1448

// AutoConns is the connections per storage agent that carry rate
// (bytes/s: the link's rate, not what one connection carried on it) over
// a path of round trip rtt and loss rate loss (a fraction): by Mathis's
// formula one connection carries MSS/RTT x 1.22/sqrt(loss), so
// ceil(rate / that), at least 1 and at most max (at most MaxConns when
// max <= 0). An unknown rtt or loss (zero) gives 1: without loss or delay
// one connection fills a link. A known path with an unknown rate gives
// max, since the link could be any rate and an idle connection costs
// little.
func AutoConns(rate float64, rtt time.Duration, loss float64, max int) int {
	if max <= 0 || max > MaxConns {
		max = MaxConns
	}
	if rtt <= 0 || !(loss > 0) {
		return 1
	}
	if !(rate > 0) {
		return max
	}
	per := mss / rtt.Seconds() * 1.22 / math.Sqrt(min(loss, 1))
	n := math.Ceil(rate / per)
	if n < 1 {
		return 1
	}
	if n > float64(max) {
		return max
	}
	return int(n)
}

// PriorLoss is the loss rate FirstConns assumes of a path whose loss is
// not measured yet: 0.1%, what a long path across the Internet or between
// regions loses often enough that one loss-based connection there cannot
// be counted on to fill a link (MSS/RTT x 1.22/sqrt(0.001) is 2.8 MB/s at
// 20 ms). A guess too high costs a few idle connections; one too low costs
// a first epoch at a fraction of the link's rate.
const PriorLoss = 0.001

// priorRate is the link rate FirstConns assumes when none is known:
// 1 Gbit/s.
const priorRate = 125e6

// priorRTT is the least round trip FirstConns takes for a long path:
// under it a path is a LAN or a metro link, where loss is rare, and a
// round trip read from a few packets of a new connection on a loaded host
// (scheduling, delayed acknowledgements) can read several milliseconds.
const priorRTT = 10 * time.Millisecond

// FirstConns is the connections per storage agent before the path's loss
// is measured: one under priorRTT, else AutoConns of rate (0: unknown,
// taken as 1 Gbit/s) and rtt at PriorLoss: most of MaxConns from 20 ms.
func FirstConns(rate float64, rtt time.Duration) int {
	if rtt < priorRTT {
		return 1
	}
	if !(rate > 0) {
		rate = priorRate
	}
	return AutoConns(rate, rtt, PriorLoss, 0)
}

// RateBased reports whether congestion control cc (a storage agent's, as
// its Info names it: InfoResponse.tcp_congestion) paces by its estimate
// of the path's bandwidth and round trip, as bbr and its versions do,
// rather than halving its window at each loss. Mathis's ceiling of one
// connection on a lossy path (AutoConns) binds a loss-based sender only.
func RateBased(cc string) bool { return strings.HasPrefix(cc, "bbr") }

// Stripes is the request counts of the stripes a window of count
// requests is spread over on conns connections: one stripe per
// connection, at most count of them and at least one, count over them
// with the first ones a request more, each at least one.
func Stripes(count, conns int) []int {
	n := max(1, min(conns, count))
	out := make([]int, n)
	for i := range n {
		c := count / n
		if i < count%n {
			c++
		}
		out[i] = max(c, 1)
	}
	return out
}

// Share is one of n stripes' part of an agent-wide bound b: b over n,
// rounded up, 0 (unbounded) when b is.
func Share(b int64, n int) int64 {
	return (b + int64(n) - 1) / int64(n)
}
