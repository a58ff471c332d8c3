package linkwatch

import (
	"time"
)

// Windows by bandwidth x round trip. A window of a fixed count of
// requests holds count x response bytes in flight: on a long link that is
// a fraction of what the link holds (500 Mbit/s at 80 ms holds 5 MB; 64
// responses of 28 KB are 1.8 MB), and the link idles for the rest of each
// round trip. So the engine reads each storage agent's link every
// Interval through an epoch (Watch: TCP_INFO at both ends, a timed Info
// call else; its fetcher's Tracker keeps the readings), and the agent's
// window grows to cover BDPFactor bandwidth-delay products on top of what
// it holds on a short link: in count, the configured window plus enough of
// the epoch's mean responses for those bytes (WindowCount); in bytes, the
// pacing of several agents (PaceBytes) and the raw lane (RawFlight) gain
// the same bytes, and the offloads' storage CPU lead (CPULead) gains the
// round trip. The configured window bytes stay the hard bound of the
// bytes in flight. The bandwidth is the most the agent delivered in one
// reading's interval this epoch or the last (Memory), or the planner's
// link rate shared among the agents, whichever is more; the round trip is
// the least seen.
const (
	// Interval is how often the engine reads each link.
	Interval = 250 * time.Millisecond
	// ReadTimeout bounds one reading's Info call.
	ReadTimeout = time.Second
)

// PaceTime is how much of its storage agent's measured delivery a fetch
// window holds when an epoch has several agents (PaceBytes). The last
// window of an epoch can leave the other agents idle for about this long,
// so a longer time puts the end of every epoch past the plan's prediction;
// a much shorter one gains nothing, the windows then too short to keep a
// link busy through a slow response.
const PaceTime = 100 * time.Millisecond

// With one storage agent, the link is shared by the two lanes of a plan
// that mixes raw fetches with offloads (schedule.Schedule): a raw fetch
// holds only the link, an offload the storage CPU and then the link.
// RawLead is how much of the link's time the raw fetches in flight may
// hold (RawFlight): enough to keep it busy while the storage agent reads
// the next file or sits out a throttled CFS period (under 100 ms), no
// more, or each finished offload waits behind the raw bytes queued ahead
// of it. OffloadLead is how much storage CPU (the plan's estimates, per
// core) the offloads in flight may hold (CPULead): PaceTime of work
// queued, plus the offloads done and waiting on the link, up to RawLead of
// raw bytes ahead of each. Measured on the testbed (openimages-like, 100
// Mbit/s, 0.5 storage core; docs/results.md, "Predictions against
// measurements"): with neither bound, a balanced plan's raw lane ran a
// second ahead, the storage CPU idled half the time until it ran dry,
// and the epoch took 1.10-1.17 of its prediction; with RawLead 100 ms
// and OffloadLead 250 ms, 1.00-1.05; with 150-250 ms raw, 1.00-1.11.
const (
	RawLead     = 100 * time.Millisecond
	OffloadLead = 250 * time.Millisecond
)

// PaceBytes is the bytes a storage agent's window holds in an epoch with
// several agents: what the agent delivered in PaceTime at rate (bytes/s,
// its bytes since its first response over the time since) plus bdp (its
// bandwidth-delay products, Tracker.BDP), at least 4 mean responses (of
// served bytes in n responses) and at most windowBytes. Pulling then gives each agent a share of the epoch in
// proportion to its rate and never leaves a slow agent (a slower link, a
// busier CPU) holding the last positions for longer than about PaceTime:
// with a window of a fixed count of requests, an agent on a much slower
// link than its peer's holds a large share of the epoch's positions at
// its end, and pulling loses most of its advantage over round-robin.
func PaceBytes(rate float64, bdp, served, n, windowBytes int64) int64 {
	b := int64(rate*PaceTime.Seconds()) + bdp
	b = max(b, 4*served/n)
	return min(b, windowBytes)
}

// RawFlight is the raw bytes in flight of one storage agent's window in
// an epoch with it alone, on a link of linkRate bytes/s: RawLead of the
// link, at least four mean raw files (meanRaw), plus bdp; 0 (unbounded)
// when the rate is unknown. Several agents' windows are paced by bytes
// already (PaceBytes).
func RawFlight(linkRate float64, meanRaw, bdp int64) int64 {
	if !(linkRate > 0) {
		return 0
	}
	return max(int64(linkRate*RawLead.Seconds()), 4*meanRaw) + bdp
}

// CPULead is the storage CPU (ns, by the plan's estimates) the offloads
// in flight of one storage agent's window hold on an agent of cpus cores
// (at least one): OffloadLead of them, or PaceTime in an epoch with
// several agents (paced), each plus BDPFactor round trips rtt, since an
// offload holds its CPU until its response arrived. A window of offloads
// alone would commit seconds of a contended storage CPU ahead of the
// shedder while the link idles.
func CPULead(cpus float64, paced bool, rtt time.Duration) int64 {
	lead := OffloadLead
	if paced {
		lead = PaceTime
	}
	lead += BDPFactor * rtt
	return int64(max(cpus, 1) * float64(lead))
}
