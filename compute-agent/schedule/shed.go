package schedule

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Shedding: work-conserving offload, decided for the rest of the epoch.
//
// The storage agents' admission (FetchRequest.fallback) looks at one
// request against the backlog they already hold, which the fetch window
// keeps short, so it only notices a shrunken CPU at the end of an epoch,
// when the raw lane has run dry and the link idles behind the offloads
// left. By then the cheapest fix, sending the least efficient offloads
// raw while the link still had room, is gone.
//
// The compute agent knows the rest of its epoch, so it re-balances it while
// it runs. From the last shedWindow offloads served as planned it measures
// the storage agents' throughput against the plan (the plan's CPU estimate
// over the budget time each held, times its worker's share of a core):
//
//	S = planned cores x ratio
//
// (the planned cores alone while the ratio is within ShedTrigger of 1,
// and before any offload has come back: Prime), and compares the storage
// time of the offloads still owed, C/S, with the link time of every byte
// still owed, B/R (the planner's link rate). When the storage side would
// finish more than ShedSlack after the link, it takes the offloads not
// yet requested from the least efficient (the plan's priority: bytes
// saved per storage CPU-ms) up, moving each one's CPU out of C and its
// saved bytes into B, until the two meet: those positions are requested
// raw (split 0) and finished here. Every recomputation starts again from
// the plan, so when the storage side recovers, the positions still to
// come are offloaded again.
//
// The bytes the model sees are the same at any split, so shedding changes
// only where the work runs.

const (
	// shedWindow is how many recent offloads measure the storage
	// agents' throughput; shedMin is how many must have finished first.
	// One offload's budget time over the plan's estimate scatters by
	// about 0.4 in the log (its crop differs from the profiled one's,
	// and the cores are shared; 2026-11-30, openimages-like at half a
	// core): over 32 the mean's standard error is 0.07, a third of the
	// ShedTrigger band (log 1.25 = 0.22). Over 16 the window read
	// 0.78-1.35 of the epoch's own mean and shed on noise.
	shedWindow = 32
	shedMin    = 32
	// shedEvery is the least time between recomputations.
	shedEvery = 50 * time.Millisecond
	// ShedSlack is how far past the link's the storage side may finish
	// before offloads are shed. ShedTrigger is how far the storage
	// agents' measured speed (planned over held ns, over the last
	// shedWindow offloads) must be from the plan's, either way, before
	// the shedder prices the rest of the epoch at it rather than at the
	// plan's: a window's noise (above), and an epoch's own offset from
	// the plan's costs (0.85-1.17 measured; the next epoch's calibration
	// corrects it), should not move raw bytes onto a link a balanced plan
	// has already filled. Within it the epoch runs the cut the plan's own
	// costs call for (Prime), which is what the model predicts
	// (planner.Shed); a neighbour that takes the storage CPU moves it
	// past the band within about a dozen offloads.
	ShedSlack   = 0.05
	ShedTrigger = 0.25
)

// A position's state in the shedder.
const (
	owed    uint8 = iota // not requested yet
	asked                // requested at its planned split
	shedRaw              // requested raw: shed
	done                 // received
)

// Shedder is one epoch's shedding state.
type Shedder struct {
	cores float64 // the storage agents' cores, as planned
	rate  float64 // the planner's link rate, bytes/s
	// perByte is the planner's storage CPU ns per byte sent
	// (policy.Resources.StorageNSPerByte): 0 where it has none.
	perByte float64
	now     func() time.Time

	// By position: the plan's priority and storage ns (on the planner's
	// clock: the profile's estimate over its storage speed) of an
	// offloaded position, 0 for a raw one; and the wire bytes of its raw
	// and planned forms.
	prio      []uint32
	cost      []float64
	raw, wire []float64
	// byPrio lists the offloaded positions, least efficient first.
	byPrio []int

	// cut: positions with a priority below it are requested raw.
	cut atomic.Uint32
	// primed is the cut at the plan's own speed (Prime), which the
	// epoch keeps while the measured speed is within ShedTrigger of it.
	primed uint32
	// shed counts the positions requested raw.
	shed atomic.Int64

	mu    sync.Mutex
	state []uint8 // by position: owed, asked (offloaded), shed (asked raw) or done
	last  time.Time
	// A ring of the last shedWindow offloads served as planned: the
	// plan's ns and the budget ns the storage agent held times its
	// worker's share.
	planned, held [shedWindow]float64
	n             int
}

// Hints is what the shedder needs of the epoch's plan (planner.RunPlan).
type Hints interface {
	// Hinted reports whether the plan carries per-sample hints.
	Hinted() bool
	// Hint is sample's priority (bytes saved per storage CPU-ms) and
	// storage CPU estimate (ns on the profile's clock).
	Hint(sample uint64) (prio uint32, ns uint64)
}

// CPUOf is the schedule's storage CPU estimate of a position of order
// (position -> sample) by the hints h (Schedule.CPUOf), nil without
// hints.
func CPUOf(h Hints, order []uint64) func(pos, k int) int64 {
	if !h.Hinted() {
		return nil
	}
	return func(pos, _ int) int64 {
		_, c := h.Hint(order[pos])
		return int64(c)
	}
}

// NewShedder plans shedding for an epoch of positions order (position ->
// sample) at their planned splits, or returns nil when there is nothing to
// shed: no per-sample plan, no offload, or no known link rate (bytes/s) or
// storage cores. wire is a sample's estimated wire bytes at split k;
// speed, the planner's storage speed, turns the hints' ns into the
// planner's clock; perByte is the planner's storage CPU ns per byte sent
// (0: none).
func NewShedder(order []uint64, split []int, wire func(sample uint64, k int) float64, hints Hints, speed, perByte, linkRate, cores float64, now func() time.Time) *Shedder {
	if !hints.Hinted() || linkRate <= 0 || cores <= 0 {
		return nil
	}
	n := len(order)
	s := &Shedder{
		cores: cores, rate: linkRate, perByte: max(perByte, 0), now: now,
		prio: make([]uint32, n), cost: make([]float64, n), raw: make([]float64, n), wire: make([]float64, n),
		state: make([]uint8, n),
	}
	for pos, sample := range order {
		k := split[pos]
		s.raw[pos] = wire(sample, 0)
		s.wire[pos] = wire(sample, k)
		if k == 0 {
			continue
		}
		prio, ns := hints.Hint(sample)
		if ns == 0 {
			continue
		}
		s.prio[pos], s.cost[pos] = prio, float64(ns)/speed
		s.byPrio = append(s.byPrio, pos)
	}
	if len(s.byPrio) == 0 {
		return nil
	}
	slices.SortStableFunc(s.byPrio, func(a, b int) int { return cmp.Compare(s.prio[a], s.prio[b]) })
	return s
}

// Split is the Split position pos is requested at: the planned k, or 0
// when it is shed.
func (s *Shedder) Split(pos, k int) int {
	if s == nil || k == 0 || s.cost[pos] == 0 || s.prio[pos] >= s.cut.Load() {
		return k
	}
	return 0
}

// Requested records that pos went out at split k (planned: want).
func (s *Shedder) Requested(pos, k, want int) {
	if s == nil {
		return
	}
	st := asked
	if k != want {
		st = shedRaw
		s.shed.Add(1)
	}
	s.mu.Lock()
	if s.state[pos] != done {
		s.state[pos] = st
	}
	s.mu.Unlock()
}

// Received records pos as Received; an offload served as planned also
// records the budget time its storage agent held (times the worker's
// share of a core), and may re-balance the rest of the epoch.
func (s *Shedder) Received(pos int, offloaded bool, held float64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state[pos] = done
	if !offloaded || s.cost[pos] == 0 || held <= 0 {
		return
	}
	i := s.n % shedWindow
	s.planned[i], s.held[i] = s.cost[pos], held
	s.n++
	if now := s.now(); s.n >= shedMin && now.Sub(s.last) >= shedEvery {
		s.last = now
		s.rebalanceLocked()
	}
}

// Count is how many positions were shed.
func (s *Shedder) Count() int64 {
	if s == nil {
		return 0
	}
	return s.shed.Load()
}

// Prime sets the cut the plan's own costs call for (the storage agents
// as fast as planned), before any offload has been measured: the cut the
// model's prediction assumes (planner.Shed applies the same rule to the
// whole epoch). Without it the first window of requests, sent before
// shedMin offloads have come back, went out at their planned splits
// however storage-bound the plan, and the epoch carried the offloads the
// prediction had shed. Call it once the positions already received are
// marked Done. The epoch keeps this cut while the measured speed is
// within ShedTrigger of the plan's (rebalanceLocked).
func (s *Shedder) Prime() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rebalanceAtLocked(s.cores)
	s.primed = s.cut.Load()
}

// rebalanceLocked sets cut for the positions not yet requested, at the
// storage agents' measured speed.
func (s *Shedder) rebalanceLocked() {
	var planned, held float64
	for i := range min(s.n, shedWindow) {
		planned += s.planned[i]
		held += s.held[i]
	}
	if planned <= 0 || held <= 0 {
		return
	}
	if m := planned / held; m < 1/(1+ShedTrigger) || m > 1+ShedTrigger {
		s.rebalanceAtLocked(s.cores * m)
		return
	}
	// Within the noise: the plan's cut, fixed when the epoch started.
	// Recomputed over what is owed at each moment it would follow the
	// mix of the positions left (which offloads happen to remain) and
	// shed more than the plan's cut in all.
	s.cut.Store(s.primed)
}

// rebalanceAtLocked sets cut for the positions not yet requested with the
// storage agents running speed planned ns per ns.
func (s *Shedder) rebalanceAtLocked(speed float64) {
	// What is still owed: storage ns of the offloads requested as planned
	// or still to request, and every position's wire bytes.
	var storage, bytes float64
	for pos, st := range s.state {
		switch {
		case st == done:
		case s.cost[pos] == 0 || st == shedRaw:
			bytes += s.raw[pos]
		default:
			storage += s.cost[pos]
			bytes += s.wire[pos]
		}
	}
	cut := uint32(0)
	link := func() float64 { return bytes / s.rate * 1e9 }
	// The storage side's time: the offloads' ops at speed, and sending
	// every byte still owed (the planner's transport CPU per byte, on the
	// agents' cores), as the model prices it.
	stor := func() float64 { return storage/speed + bytes*s.perByte/s.cores }
	// One priority's offloads together, as the cut takes them.
	for j := 0; j < len(s.byPrio); {
		if stor() <= link()*(1+ShedSlack) {
			break
		}
		p := s.prio[s.byPrio[j]]
		var dStorage, dBytes float64
		owes := false
		for ; j < len(s.byPrio) && s.prio[s.byPrio[j]] == p; j++ {
			if pos := s.byPrio[j]; s.state[pos] == owed {
				dStorage += s.cost[pos]
				dBytes += s.raw[pos] - s.wire[pos]
				owes = true
			}
		}
		if !owes {
			continue
		}
		// The last group that crosses over may put more on the link than
		// it takes off the storage side: keep it.
		before := max(stor(), link())
		storage -= dStorage
		bytes += dBytes
		if max(stor(), link()) >= before {
			break
		}
		cut = p + 1
	}
	s.cut.Store(cut)
}

// Done records pos as received before the shedder existed (a plan that
// took over a running epoch: schedule.Schedule.Resplit).
func (s *Shedder) Done(pos int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.state[pos] = done
	s.mu.Unlock()
}
