package engine

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	shards "github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/internal/placement/wire"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// placement builds the epoch's placement over its fetchers: who holds each
// position's sample (Fetcher.holds), and which of them it is bound to:
// with PlacementRoundRobin strictly, in turn; otherwise by preference, to
// the agent the plan chose (a cluster plan's Replica). unowned lists the positions no Fetcher holds.
func (e *Epoch) placement(fs []*Fetcher) (pl schedule.Placement, unowned []int, err error) {
	if len(fs) > schedule.MaxFetchers {
		return pl, nil, fmt.Errorf("%w: %d storage agents, at most %d per epoch", ErrNoStorage, len(fs), schedule.MaxFetchers)
	}
	sharded := false
	for _, f := range fs {
		sharded = sharded || f.holds != nil
	}
	n := len(e.order)
	all := schedule.AllFetchers(len(fs))
	if sharded {
		pl.Owners = make([]uint64, n)
		for pos, s := range e.order {
			for i, f := range fs {
				if f.holds == nil || f.holds(s) {
					pl.Owners[pos] |= 1 << i
				}
			}
			if pl.Owners[pos] == 0 {
				unowned = append(unowned, pos)
			}
		}
	}
	switch {
	case len(fs) < 2:
	case e.cfg.RoundRobin:
		pl.Bound = make([]uint64, n)
		for pos := range n {
			o := all
			if pl.Owners != nil {
				o = pl.Owners[pos]
			}
			if k := bits.OnesCount64(o); k > 0 {
				pl.Bound[pos] = nthBit(o, pos%k)
			}
		}
	default:
		pl.Bound, pl.Prefer = e.planned(fs), true
	}
	return pl, unowned, nil
}

// planned binds each position to the storage agent the plan chose for its
// sample (Plan.Replica), where that agent is among fs; nil when the
// plan chose none or the epoch has no plan.
func (e *Epoch) planned(fs []*Fetcher) []uint64 {
	plan := e.runPlan()
	if plan == nil {
		return nil
	}
	idx := make(map[string]int, len(fs))
	for i, f := range fs {
		idx[f.name] = i
	}
	var bound []uint64
	for pos, s := range e.order {
		name, ok := plan.Replica(s)
		if !ok {
			continue
		}
		if i, ok := idx[name]; ok {
			if bound == nil {
				bound = make([]uint64, len(e.order))
			}
			bound[pos] = 1 << i
		}
	}
	return bound
}

// nthBit is the n-th lowest set bit of m (n < popcount(m)).
func nthBit(m uint64, n int) uint64 {
	for range n {
		m &= m - 1
	}
	return m & -m
}

// byStorage is each Fetcher's share of the epoch, in fs's order.
func byStorage(fs []*Fetcher) []report.StorageStats {
	out := make([]report.StorageStats, len(fs))
	for i, f := range fs {
		out[i] = report.StorageStats{Name: f.name, Samples: f.served.Load(), Bytes: f.servedBytes.Load(), Shards: f.shards, OpsCPUSeconds: float64(f.opsNS.Load()) / 1e9}
	}
	return out
}

// announced takes the shards f's storage agent holds from its Info: a
// layout of the catalog and the held shards (checked, from outside). An
// agent that announces no layout holds every sample.
func (f *Fetcher) announced(info *dataplanepb.InfoResponse, cat *Catalog) error {
	layout, held, err := wire.DecodePlacement(info)
	if errors.Is(err, shards.ErrNoShards) && len(info.GetLayout()) == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	if layout.Total() != cat.Total {
		return fmt.Errorf("%s: layout of %d samples, catalog of %d", f.name, layout.Total(), cat.Total)
	}
	missing, err := wire.DecodeMissing(info, layout, held)
	if err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	f.place = &announcement{layout: layout, held: make([]bool, layout.Len()), name: info.GetPlacementName(), replicas: int(info.GetReplicas())}
	for _, s := range held {
		f.place.held[s] = true
	}
	if len(missing) > 0 {
		f.place.missing = make([]bool, layout.Len())
		for _, s := range missing {
			f.place.missing[s] = true
		}
	}
	f.shards = len(held)
	if len(held) == layout.Len() {
		return nil // every shard
	}
	f.holds = f.place.holds
	return nil
}

// announcement is what a storage agent's Info said about placement.
type announcement struct {
	layout   shards.Layout
	held     []bool // by shard
	name     string // its placement (gossip) name
	replicas int
	// missing marks the shards the agent does not store (it runs from a
	// manifest with part of the files); nil: it stores every shard.
	missing []bool
}

// stores reports whether the agent has shard s's files.
func (a *announcement) stores(s int) bool { return a.missing == nil || !a.missing[s] }

func (a *announcement) holds(sample uint64) bool {
	s, ok := a.layout.ShardOf(sample)
	return ok && a.held[s]
}

// replace gives the shards that none of fs holds to the agents of fs that
// store them, by rendezvous hashing over those agents' names alone, as the
// storage agents themselves will once gossip has declared the missing
// holders dead: a storage agent that died (and is unreachable now) no
// longer leaves its shards unavailable for the epochs gossip takes to
// notice. Agents of a placement group have the same dataset (the same
// fingerprint), all of its files or, from a manifest, part of them (their
// missing shards); a shard that no reachable agent stores stays unplaced,
// and its samples unavailable. It does so only when every agent of fs
// announced the same layout and replica count under a name, and returns
// how many shards it placed.
func replace(fs []*Fetcher) int {
	if len(fs) == 0 || fs[0].place == nil {
		return 0
	}
	first := fs[0].place
	for _, f := range fs {
		p := f.place
		if p == nil || p.name == "" || p.replicas != first.replicas || p.layout.Digest() != first.layout.Digest() {
			return 0
		}
	}
	byName := map[string]*Fetcher{}
	for _, f := range fs {
		byName[f.place.name] = f
	}
	placed := 0
	for s := range first.layout.Len() {
		held := false
		for _, f := range fs {
			held = held || f.place.held[s]
		}
		if held {
			continue
		}
		storers := make([]string, 0, len(fs))
		for _, f := range fs {
			if f.place.stores(s) {
				storers = append(storers, f.place.name)
			}
		}
		if len(storers) == 0 {
			continue
		}
		for _, owner := range shards.Owners(s, storers, first.replicas) {
			f := byName[owner]
			f.place.held[s] = true
			f.shards++
			if f.holds == nil {
				f.holds = f.place.holds
			}
		}
		placed++
	}
	return placed
}

// paceTime is how much of its storage agent's measured delivery a
// Fetcher's window holds when an epoch has several agents. The last
// window of an epoch can leave the other agents idle for about this long,
// so a longer time puts the end of every epoch past the plan's prediction;
// a much shorter one gains nothing, the windows then too short to keep a
// link busy through a slow response.
const paceTime = 100 * time.Millisecond

// pace caps f's window bytes, when the epoch has several storage agents
// (its storage CPU is capped from the start: the offloads in flight at
// most paceTime of the agent's cores, by the plan's estimates),
// at what its agent delivered in paceTime (its bytes since its first
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
	if f.paceFrom.IsZero() {
		f.paceFrom = now
		return
	}
	n, got := f.served.Load(), f.servedBytes.Load()
	elapsed := now.Sub(f.paceFrom)
	if n < 8 || elapsed <= 0 {
		return
	}
	rate := float64(got) / elapsed.Seconds()
	b := int64(rate * paceTime.Seconds())
	b = max(b, 4*got/n)
	b = min(b, e.cfg.WindowBytes)
	e.sched.SetMaxBytes(&f.w, b)
}

// transportMinBytes is the least an epoch must have received for its
// transport figure to count.
const transportMinBytes = 1 << 20

// transport measures what sending costs the storage agents of fs beyond
// their ops: each one's process CPU over the epoch (Info at the start and
// now) less the CPU its responses reported for their ops, summed, over the
// bytes they sent. Agents that report no process CPU, or do not answer
// within a second, are left out; 0 when none is left or too few bytes
// crossed. An agent that also served other compute agents meanwhile
// counts their CPU too, so the figure errs high then.
func transport(ctx context.Context, fs []*Fetcher) float64 {
	var ns, bytes float64
	for _, f := range fs {
		got := f.servedBytes.Load()
		if f.cpu0 == 0 || got == 0 {
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := f.client.Info(ictx, &dataplanepb.InfoRequest{})
		cancel()
		if err != nil || info.GetProcessCpuNs() < f.cpu0 {
			continue
		}
		spent := float64(info.GetProcessCpuNs()-f.cpu0) - float64(f.opsNS.Load())
		ns += max(spent, 0)
		bytes += float64(got)
	}
	if bytes < transportMinBytes {
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
