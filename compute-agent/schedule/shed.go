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
// and compares the storage time of the offloads still owed, C/S, with the
// link time of every byte still owed, B/R (the planner's link rate). When
// the storage side would finish more than ShedTrigger after the link (once
// shedding, ShedSlack), it
// takes the offloads not yet requested from the least efficient (the
// plan's priority: bytes saved per storage CPU-ms) up, moving each one's
// CPU out of C and its saved bytes into B, until the two meet: those
// positions are requested raw (split 0) and finished here. Every
// recomputation starts again from the plan, so when the storage side
// recovers, the positions still to come are offloaded again.
//
// The bytes the model sees are the same at any split, so shedding changes
// only where the work runs.

const (
	// shedWindow is how many recent offloads measure the storage
	// agents' throughput; shedMin is how many must have finished first.
	shedWindow = 16
	shedMin    = 8
	// shedEvery is the least time between recomputations.
	shedEvery = 50 * time.Millisecond
	// ShedSlack is how far past the link's the storage side may finish
	// once offloads are being shed; ShedTrigger how far before the
	// first one is. The plan balances the two, and the first offloads of
	// an epoch measure slow (a CPU quota spent by a neighbour while the
	// agent idled between epochs): a small imbalance is cheaper to
	// carry than raw bytes the link must take on.
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
	now   func() time.Time

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
// planner's clock.
func NewShedder(order []uint64, split []int, wire func(sample uint64, k int) float64, hints Hints, speed, linkRate, cores float64, now func() time.Time) *Shedder {
	if !hints.Hinted() || linkRate <= 0 || cores <= 0 {
		return nil
	}
	n := len(order)
	s := &Shedder{
		cores: cores, rate: linkRate, now: now,
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

// rebalanceLocked sets cut for the positions not yet requested.
func (s *Shedder) rebalanceLocked() {
	var planned, held float64
	for i := range min(s.n, shedWindow) {
		planned += s.planned[i]
		held += s.held[i]
	}
	if planned <= 0 || held <= 0 {
		return
	}
	speed := s.cores * planned / held // planned ns per ns
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
	if s.cut.Load() == 0 && storage/speed <= link()*(1+ShedTrigger) {
		return
	}
	for _, pos := range s.byPrio {
		if storage/speed <= link()*(1+ShedSlack) {
			break
		}
		if s.state[pos] != owed {
			continue
		}
		storage -= s.cost[pos]
		bytes += s.raw[pos] - s.wire[pos]
		cut = s.prio[pos] + 1
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
