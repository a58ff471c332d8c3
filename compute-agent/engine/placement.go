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

// pace caps f's window bytes (its stripes' together), when the epoch has
// several storage agents, at linkwatch.PaceBytes of the rate its agent
// delivered (its bytes since its first response of the epoch over the
// time since; from the 8th response on) and its responses. Its storage
// CPU is capped from the start (capLanes).
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
	b := linkwatch.PaceBytes(rate, f.bdp(rate), got, n, e.cfg.WindowBytes)
	for _, s := range f.stripes {
		e.sched.SetMaxBytes(&s.w, f.stripeShare(b))
	}
}

// transport measures what sending costs the storage agents of fs beyond
// their ops over the epoch (sendcost.PerByte, from their Info at the
// start and now, each within a second and its round trip).
func transport(ctx context.Context, fs []*Fetcher) float64 {
	agents := make([]sendcost.Agent, len(fs))
	for i, f := range fs {
		agents[i] = sendcost.Agent{Client: f.client, Start: f.cpu0, Got: f.servedBytes.Load(), Ops: f.opsNS.Load(),
			Timeout: linkwatch.CountRTT(time.Second, f.RTT())}
	}
	return sendcost.PerByte(ctx, agents)
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
