package engine

import (
	"slices"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// An epoch may start under a provisional plan and take its real one while
// it runs (Swap): a policy run without a saved profile serves its first
// epoch under No-Off at once, while stage 1 measures and plans beside it,
// and the positions not yet requested then follow the plan. A split never
// changes a sample's tensor, so the swap changes only which side runs
// which ops.

// runPlan is the epoch's current plan; nil before NewEpoch stored one.
func (e *Epoch) runPlan() Plan {
	if p := e.plan.Load(); p != nil {
		return *p
	}
	return nil
}

// shedder is the epoch's current shedder (nil: none).
func (e *Epoch) shedder() *schedule.Shedder { return e.shed.Load() }

// newShedder is the epoch's shedder under plan at its current splits
// (schedule.NewShedder).
func (e *Epoch) newShedder(plan Plan, linkRate, cores float64) *schedule.Shedder {
	wire := func(sample uint64, k int) float64 { return float64(e.cfg.Sizes.Estimate(k, e.cat.RawSizes[sample])) }
	return schedule.NewShedder(e.order, e.split, wire, plan, plan.StorageSpeed(), plan.StorageNSPerByte(), linkRate, cores, e.cfg.Now)
}

// capLanes bounds what each lane of f's window holds in flight, each
// stripe its share, under the schedule's lock once the epoch runs: the
// offloads (when the plan has estimates, hinted) linkwatch.CPULead of the
// agent's cores, past which the window takes raw positions; the raw
// fetches, in an epoch with one storage agent and a known link rate
// (bytes/s), linkwatch.RawFlight, past which it takes offloads (several
// agents' windows are paced by bytes already: pace).
func (f *Fetcher) capLanes(hinted bool, linkRate float64) {
	f.laneRate = linkRate
	paced := f.e != nil && f.e.paced
	var raw int64
	if f.e != nil && !paced {
		raw = linkwatch.RawFlight(linkRate, f.e.meanRaw, f.bdp(linkRate))
	}
	for _, s := range f.stripes {
		if hinted {
			s.w.MaxCPU = f.stripeShare(linkwatch.CPULead(f.CPUs(), paced, f.RTT()))
		}
		s.w.MaxRawFlight = f.stripeShare(raw)
	}
}

// Swap makes plan the epoch's plan for every position no fetcher has
// requested yet, with its split splitOf(sample) (the caller's cut of the
// plan's split to what this agent runs); linkRate and cores are the
// planner's, for shedding. Positions already requested keep the split
// they went out at, and so do those the node's cache reads or fills.
// With no position left it changes nothing. Safe while the epoch runs
// (the schedule's lock orders it with every request); call it after
// prepare. It returns how many positions had been
// requested under the plans before.
//
// In a warm epoch (the first epoch of a run planned from estimates) a
// plan with a cache also takes the cache: the positions left whose
// samples it keeps resident go raw and fill the cache now (cache.Use.Fills),
// so that the next epoch finds them there instead of filling it itself.
func (e *Epoch) Swap(plan Plan, splitOf func(sample uint64) int, linkRate, cores float64) int {
	planned := 0
	fill := e.cc.Fills(plan)
	left := e.sched.Resplit(func(pos int) bool {
		planned++
		s := e.order[pos]
		if e.cc.Want(pos) {
			return e.split[pos] != 0 || e.codecOf(e.runPlan(), s) != wireform.CodecNone
		}
		raw := e.cat.RawSizes[s]
		before := e.cfg.Sizes.Estimate(e.shedder().Split(pos, e.split[pos]), raw)
		k := splitOf(s)
		if fill && plan.Cached(s) && e.codecOf(plan, s) == wireform.CodecNone {
			k = 0 // fetched raw, into the cache
			e.cc.Add(pos)
		}
		e.split[pos] = k
		e.left.Add(e.cfg.Sizes.Estimate(k, raw) - before)
		return k != 0 || e.codecOf(plan, s) != wireform.CodecNone
	}, func(received []bool) {
		if planned == 0 {
			return // every position went out under the plans before
		}
		e.plan.Store(&plan)
		if fill {
			e.cc.SetKeep(plan.Cached) // its Puts may evict the rest
		}
		e.sched.CPUOf = schedule.CPUOf(plan, e.order)
		for _, f := range e.fs {
			f.capLanes(e.sched.CPUOf != nil, linkRate)
		}
		if e.cfg.StrictOffload {
			return
		}
		sh := e.newShedder(plan, linkRate, cores)
		for pos, done := range received {
			if done {
				sh.Done(pos)
			}
		}
		sh.Prime()
		e.shed.Store(sh)
	})
	e.log.Info().Str("plan", plan.Name()).Int("requested", len(e.order)-left).Int("left", left).Msg("plan switched mid-epoch")
	return len(e.order) - left
}

// codecOf is the codec plan requests for sample.
func (e *Epoch) codecOf(plan Plan, sample uint64) wireform.Codec {
	return plan.Codec(sample, e.cfg.Codec)
}

// BytesReceived is the wire bytes received so far.
func (e *Epoch) BytesReceived() int64 { return e.bytesReceived.Load() }

// kept hands Opts.KeepRaw the raw file of it, finished from in, when it
// arrived raw.
func (e *Epoch) kept(it *schedule.Item, in ops.Value) {
	if e.keepRaw == nil || it.Split != 0 {
		return
	}
	if b, ok := in.(ops.Encoded); ok {
		e.keepRaw(it.Sample, slices.Clone([]byte(b)))
	}
}
