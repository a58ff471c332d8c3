package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/sendcost"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// placement builds the epoch's placement over its fetchers
// (catalog.Place): who holds each position's sample, and which of them it
// is bound to, in turn (RoundRobin) or by the plan's Replica. unowned
// lists the positions no Fetcher holds.
func (e *Epoch) placement(fs []*Fetcher) (pl schedule.Placement, unowned []int, err error) {
	if len(fs) > schedule.MaxFetchers {
		return pl, nil, fmt.Errorf("%w: %d storage agents, at most %d per epoch", ErrNoStorage, len(fs), schedule.MaxFetchers)
	}
	holds, names := make([]func(uint64) bool, len(fs)), make([]string, len(fs))
	for i, f := range fs {
		holds[i], names[i] = f.hold.HoldsFunc(), f.name
	}
	var replica func(uint64) (string, bool)
	if plan := e.runPlan(); plan != nil {
		replica = plan.Replica
	}
	pl, unowned = catalog.Place(e.order, holds, e.cfg.RoundRobin, names, replica)
	return pl, unowned, nil
}

// byStorage is each Fetcher's share of the epoch, in fs's order.
func byStorage(fs []*Fetcher) []report.StorageStats {
	out := make([]report.StorageStats, len(fs))
	for i, f := range fs {
		out[i] = report.StorageStats{Name: f.name, Conns: len(f.stripes), Samples: f.served.Load(), Bytes: f.servedBytes.Load(), Shards: f.hold.Shards(), OpsCPUSeconds: float64(f.opsNS.Load()) / 1e9,
			Link: f.linkReport()}
	}
	return out
}

// replace gives the shards none of fs holds to the agents of fs that
// store them (catalog.Replace) and returns how many it placed.
func replace(fs []*Fetcher) int {
	hs := make([]*catalog.Holdings, len(fs))
	for i, f := range fs {
		hs[i] = f.hold
	}
	return catalog.Replace(hs)
}

// paceTime is how much of its storage agent's measured delivery a
// Fetcher's window holds when an epoch has several agents. The last
// window of an epoch can leave the other agents idle for about this long,
// so a longer time puts the end of every epoch past the plan's prediction;
// a much shorter one gains nothing, the windows then too short to keep a
// link busy through a slow response.
const paceTime = 100 * time.Millisecond

// With one storage agent, the link is shared by the two lanes of a plan
// that mixes raw fetches with offloads (schedule.Schedule): a raw fetch
// holds only the link, an offload the storage CPU and then the link.
// rawLead is how much of the link's time the raw fetches in flight may
// hold: enough to keep it busy while the storage agent reads the next
// file or sits out a throttled CFS period (under 100 ms), no more, or
// each finished offload waits behind the raw bytes queued ahead of it.
// offloadLead is how much storage CPU (the plan's estimates, per core)
// the offloads in flight may hold: paceTime of work queued, plus the
// offloads done and waiting on the link, up to rawLead of raw bytes
// ahead of each. Measured on the testbed (openimages-like, 100 Mbit/s,
// 0.5 storage core; docs/results.md, "Predictions against
// measurements"): with neither bound, a balanced plan's raw lane ran a
// second ahead, the storage CPU idled half the time until it ran dry,
// and the epoch took 1.10-1.17 of its prediction; with rawLead 100 ms
// and offloadLead 250 ms, 1.00-1.05; with 150-250 ms raw, 1.00-1.11.
const (
	rawLead     = 100 * time.Millisecond
	offloadLead = 250 * time.Millisecond
)

// pace caps f's window bytes (its stripes' together), when the epoch has several storage agents
// (its storage CPU is capped from the start: the offloads in flight at
// most paceTime of the agent's cores, by the plan's estimates),
// at what its agent delivered in paceTime, plus linkwatch.BDPFactor of its
// bandwidth-delay products (link.go) (its bytes since its first
// response of the epoch over the time since; from the 8th response on),
// at least 4 average responses and at most Config.WindowBytes. Pulling
// then gives each agent a share of the epoch in proportion to its rate
// and never leaves a slow agent (a slower link, a busier CPU) holding the
// last positions for longer than about paceTime: with a window of a fixed
// count of requests, an agent on a much slower link than its peer's holds
// a large share of the epoch's positions at its end, and pulling loses
// most of its advantage over round-robin.
func (f *Fetcher) pace(now time.Time) {
	e := f.e
	if !e.paced {
		return
	}
	if f.paceFrom.CompareAndSwap(0, now.UnixNano()) {
		return
	}
	n, got := f.served.Load(), f.servedBytes.Load()
	elapsed := now.Sub(time.Unix(0, f.paceFrom.Load()))
	if n < 8 || elapsed <= 0 {
		return
	}
	rate := float64(got) / elapsed.Seconds()
	b := int64(rate*paceTime.Seconds()) + f.bdp(rate)
	b = max(b, 4*got/n)
	b = min(b, e.cfg.WindowBytes)
	for _, s := range f.stripes {
		e.sched.SetMaxBytes(&s.w, f.stripeShare(b))
	}
}

// transport measures what sending costs the storage agents of fs beyond
// their ops over the epoch (sendcost.Spent, from their Info at the start
// and now), summed, over the bytes they sent. Agents that report no
// process CPU, or do not answer within a second, are left out; 0 when
// none is left or too few bytes crossed (sendcost.MinBytes).
func transport(ctx context.Context, fs []*Fetcher) float64 {
	var ns, bytes float64
	for _, f := range fs {
		got := f.servedBytes.Load()
		if f.cpu0.Proc == 0 || got == 0 {
			continue
		}
		cpu1, ok := sendcost.Read(ctx, f.client, linkwatch.CountRTT(time.Second, f.RTT()))
		spent, known := sendcost.Spent(f.cpu0, cpu1, got, f.opsNS.Load())
		if ok && known {
			ns += spent
			bytes += float64(got)
		}
	}
	if bytes < sendcost.MinBytes {
		return 0
	}
	return ns / bytes
}

// refetchRaw finishes sample it from its raw bytes, fetched again from f's
// storage agent on a stream of their own, after its JPEG-domain cut failed
// to finish here (bad). The cut is lossless for the files it accepts, but
// a damaged file can decode whole and still give a cut that does not
// (FuzzCut found such files): the sample is not lost for that. When the
// raw fetch fails too, bad stands.
func (e *Epoch) refetchRaw(ctx context.Context, f *Fetcher, lim wireform.Limits, it *schedule.Item, bad *report.SampleFailure) *report.SampleFailure {
	data, err := e.fetchRaw(ctx, f, it.Sample)
	if err != nil {
		return bad
	}
	e.refetched.Add(1)
	e.sampleWarn().Uint64("sample", it.Sample).Str("storage", f.name).Str("cut_error", bad.Message).Msg("a cut did not finish here: fetched again raw")
	it.Split, it.Wire = 0, int64(len(data))
	_, _, bad = e.finish(f, data, lim, it)
	return bad
}
