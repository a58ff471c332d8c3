// Package schedule is the pure, I/O-free part of running an epoch: the
// epoch's order (Order, RankOrder) and its schedule, the shared state of
// which positions each storage agent's window may take, has outstanding or
// has received, with retries, hedging, shedding and the strict-order gate.
// The engine (package engine) drives it over the network.
package schedule

import (
	"cmp"
	"container/heap"
	"slices"
	"sync"
	"time"
)

// Schedule is an epoch's shared state: which positions of the permutation
// are still to be requested, which were received, and each fetcher's
// window. One mutex guards it all; every change closes sig, so waiters
// select on sig and their context and re-check.
//
// Exactly once: a position leaves the schedule when a fetcher takes it and
// returns only when the stream carrying it fails before its response
// arrived (requeue). A response is accepted only for a tag outstanding on
// its own stream and a position not yet received, so no sample is handed
// on twice; every position is either received or still owed, so none is
// lost.
//
// Two lanes: when the plan mixes raw fetches (split 0, no codec: link
// only) with offloaded ones (storage CPU, then link), each kind is taken
// in permutation order from its own lane, and while both lanes have
// positions left a window holds at most half its count of each. Taking
// strictly in permutation order instead ties the link to the storage
// CPU: a window fills with offloaded requests queued at the storage agent,
// and the raw ones behind them go out only as those complete, so when the
// two resources are balanced the link idles in the gaps and the epoch
// runs measurably over max(link, storage). With lanes each resource always
// has work queued. Batches are in
// completion order anyway; strict order (the gate) still bounds both
// lanes.
type Schedule struct {
	n int

	mu sync.Mutex
	// groups partition the positions by who may take them (placement);
	// group[pos] is a position's group, nil when there is one group.
	groups []group
	group  []uint32
	// lane[pos] is a position's lane; nil when every position is in lane 0.
	lane     []uint8
	sig      chan struct{}
	received []bool
	nRecv    int
	// In strict order a position is taken only when it lies below
	// deliverNext + gate, which bounds the batcher's reorder buffer.
	gate        int
	deliverNext int
	// prefer is Placement.Prefer.
	prefer    bool
	alive     int         // fetchers not given up
	aliveMask uint64      // their bits (window.idx)
	retries   map[int]int // transient per-sample errors so far, by position
	// Now stamps each request's send time (request.sent). Nil leaves it
	// zero.
	Now func() time.Time
	// CPUOf, when set, is the storage CPU estimate (ns) of requesting pos
	// at split k != 0, which window.maxCPU bounds.
	CPUOf func(pos, k int) int64
}

// group is the positions that the same fetchers may take (mask: the
// storage agents holding the positions' shard). When
// every fetcher of mask has given up, the group falls back to owners (the
// agents holding the shard, when mask bound it to fewer: round-robin
// placement); when none of those is left either, its positions are
// orphaned (see giveUp).
type group struct {
	mask, owners uint64
	// lanes[l] lists lane l's positions in permutation order; cursor[l]
	// is the next index never taken.
	lanes  [2][]int
	cursor [2]int
	retry  posHeap // positions taken and requeued
	owed   int     // positions not yet received
}

// MaxFetchers bounds the storage agents one epoch uses (a window's bit).
const MaxFetchers = 64

// AllFetchers is the mask of n fetchers.
func AllFetchers(n int) uint64 {
	if n >= MaxFetchers {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// NewSchedule schedules n positions that any of fetchers may take.
// offloaded, when not nil, marks the positions that run ops on storage;
// with both kinds present the schedule uses two lanes.
func NewSchedule(n, gate, fetchers int, offloaded []bool) *Schedule {
	return NewPlacedSchedule(n, gate, fetchers, offloaded, Placement{})
}

// Placement says which fetchers (bit i: the i-th storage agent) may take
// each position; a nil slice leaves every position to every fetcher.
type Placement struct {
	// Owners[pos]: the agents holding pos's sample.
	Owners []uint64
	// Bound[pos], a subset of Owners[pos]: the only agents that take pos
	// while one of them is alive (round-robin placement); 0 = Owners.
	Bound []uint64
	// Prefer makes Bound a preference (a planner's choice of replica):
	// an owner outside Bound[pos] takes pos too, once nothing is left in
	// the groups bound to it, so an agent that runs ahead of the plan
	// helps with the others' share instead of idling.
	Prefer bool
}

// NewPlacedSchedule is newSchedule under a placement. Positions of equal
// (Owners, Bound) form a group.
func NewPlacedSchedule(n, gate, fetchers int, offloaded []bool, pl Placement) *Schedule {
	all := AllFetchers(fetchers)
	s := &Schedule{n: n, sig: make(chan struct{}), received: make([]bool, n), gate: gate, alive: fetchers, aliveMask: all, prefer: pl.Prefer}
	var count int
	for _, o := range offloaded {
		if o {
			count++
		}
	}
	if count > 0 && count < n && len(offloaded) == n {
		s.lane = make([]uint8, n)
		for pos, o := range offloaded {
			if o {
				s.lane[pos] = 1
			}
		}
	}
	type key struct{ owners, bound uint64 }
	index := map[key]int{}
	if pl.Owners != nil || pl.Bound != nil {
		s.group = make([]uint32, n)
	}
	at := func(m []uint64, pos int, def uint64) uint64 {
		if m == nil {
			return def
		}
		return m[pos] & all
	}
	for pos := range n {
		k := key{at(pl.Owners, pos, all), at(pl.Bound, pos, 0)}
		g, ok := index[k]
		if !ok {
			g = len(s.groups)
			index[k] = g
			mask := k.owners
			if k.bound&k.owners != 0 {
				mask = k.bound & k.owners
			}
			s.groups = append(s.groups, group{mask: mask, owners: k.owners})
		}
		if s.group != nil {
			s.group[pos] = uint32(g)
		}
		l := s.laneOf(pos)
		s.groups[g].lanes[l] = append(s.groups[g].lanes[l], pos)
		s.groups[g].owed++
	}
	return s
}

// groupOf is pos's group.
func (s *Schedule) groupOf(pos int) *group {
	if s.group == nil {
		return &s.groups[0]
	}
	return &s.groups[s.group[pos]]
}

// laneOf is pos's lane.
func (s *Schedule) laneOf(pos int) int {
	if s.lane == nil {
		return 0
	}
	return int(s.lane[pos])
}

// serves reports whether w may take g's positions.
func (g *group) serves(w *Window) bool { return g.mask&(1<<w.Idx) != 0 }

// helps reports whether w may take g's positions once nothing is left in
// the groups it serves: it holds them, though the placement preferred
// another agent.
func (g *group) helps(w *Window) bool { return g.owners&(1<<w.Idx) != 0 && !g.serves(w) }

// nextLocked is the next position w may take, first from the retries, or
// -1; retry reports whether it is a retry. Positions of lane skip (-1:
// none) are passed over. Under a preferred placement, w takes from the
// groups it only helps when those it serves have nothing for it.
func (s *Schedule) nextLocked(w *Window, skip int) (pos int, retry bool) {
	pos, retry = s.scanLocked(w, skip, (*group).serves)
	if pos < 0 && s.prefer {
		pos, retry = s.scanLocked(w, skip, (*group).helps)
	}
	return pos, retry
}

// scanLocked is nextLocked over the groups that may(g, w).
func (s *Schedule) scanLocked(w *Window, skip int, may func(*group, *Window) bool) (pos int, retry bool) {
	best := -1
	for i := range s.groups {
		g := &s.groups[i]
		if !may(g, w) {
			continue
		}
		// A hedged position may have been received since it was put
		// back.
		for g.retry.Len() > 0 && s.received[g.retry[0]] {
			heap.Pop(&g.retry)
		}
		if g.retry.Len() > 0 && s.laneOf(g.retry[0]) != skip && (best < 0 || g.retry[0] < best) {
			best = g.retry[0]
		}
	}
	if best >= 0 {
		return best, true
	}
	for i := range s.groups {
		g := &s.groups[i]
		if !may(g, w) {
			continue
		}
		both := g.cursor[0] < len(g.lanes[0]) && g.cursor[1] < len(g.lanes[1])
		for l := range 2 {
			if l == skip || g.cursor[l] >= len(g.lanes[l]) || (both && w.laneCount[l] >= (w.MaxCount+1)/2) {
				continue
			}
			if pos := g.lanes[l][g.cursor[l]]; best < 0 || pos < best {
				best = pos
			}
		}
	}
	return best, false
}

// advanceLocked moves pos out of its group: off the retries or past its
// lane's cursor.
func (s *Schedule) advanceLocked(pos int, retry bool) {
	g := s.groupOf(pos)
	if retry {
		heap.Pop(&g.retry)
		return
	}
	g.cursor[s.laneOf(pos)]++
}

// requeueLocked puts pos back into its group's retries.
func (s *Schedule) requeueLocked(pos int) {
	heap.Push(&s.groupOf(pos).retry, pos)
}

// receivedLocked marks pos received.
func (s *Schedule) receivedLocked(pos int) {
	s.received[pos] = true
	s.nRecv++
	s.groupOf(pos).owed--
}

// freeLocked gives r's window slot back.
func (s *Schedule) freeLocked(w *Window, r *Request) {
	w.Count--
	w.laneCount[s.laneOf(r.Pos)]--
	w.Bytes -= r.Bytes
	w.CPU -= r.CPU
	w.RawFlight -= r.Raw
	r.Raw = 0
}

// broadcastLocked wakes every waiter.
func (s *Schedule) broadcastLocked() {
	close(s.sig)
	s.sig = make(chan struct{})
}

// Request is one sample requested on a stream.
type Request struct {
	Tag    uint64
	Pos    int
	Sample uint64
	Split  int
	Bytes  int64 // window bytes held: the estimate, then the actual size
	CPU    int64 // window storage CPU held until answered: the estimate (ns)
	Raw    int64 // raw bytes in flight held until answered
	Est    int64 // the estimate
	Sent   time.Time
	// Hedged marks a request of a stalled stream whose position was put
	// back into the schedule while the request stayed outstanding: if the
	// stalled stream answers after all, the first response wins and the
	// other is dropped as a duplicate.
	Hedged bool
}

// Window is one fetcher's share of the schedule; its fields are guarded by
// schedule.mu.
type Window struct {
	Idx       int // the fetcher's index: bit idx of a group's masks
	MaxCount  int
	MaxBytes  int64
	Count     int
	laneCount [2]int // count by lane
	Bytes     int64
	// CPU is the storage CPU estimate (ns) of the requests in flight (not
	// yet answered);
	// MaxCPU, when positive, bounds it (fetcher.pace).
	CPU, MaxCPU int64
	// RawFlight is the estimated bytes of a two-lane epoch's requests
	// that hold no storage CPU (raw fetches), not yet answered;
	// MaxRawFlight, when positive, bounds it. Unbounded, the raw lane
	// fills the storage agent's send buffers and the connection's
	// flow-control window with a second of raw bytes, and each offload's
	// response waits behind them, holding its share of MaxCPU while the
	// storage CPU has nothing queued (linkwatch.RawLead).
	RawFlight, MaxRawFlight int64
	nextTag                 uint64
	Outstanding             map[uint64]*Request // by tag, on the current stream
}

// Take hands w the next position if its window has room, registering the
// request as outstanding. Otherwise it returns a channel that is closed on
// the next change; done reports that every position was received.
//
// A lane that is full (an offload past MaxCPU, a raw fetch past
// MaxRawFlight) gives its turn to the other lane's next position, if
// that one has room.
func (s *Schedule) Take(w *Window, est func(pos int) (int64, uint64, int)) (r *Request, wait <-chan struct{}, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nRecv == s.n {
		return nil, nil, true
	}
	pos, retry := s.nextLocked(w, -1)
	if pos < 0 || w.Count >= w.MaxCount {
		return nil, s.sig, false
	}
	q, ok := s.roomLocked(w, pos, est)
	if !ok {
		pos, retry = s.nextLocked(w, s.laneOf(pos))
		if pos < 0 {
			return nil, s.sig, false
		}
		if q, ok = s.roomLocked(w, pos, est); !ok {
			return nil, s.sig, false
		}
	}
	b, sample, k, c := q.bytes, q.sample, q.split, q.cpu
	if w.Count > 0 && w.Bytes+b > w.MaxBytes {
		return nil, s.sig, false
	}
	s.advanceLocked(pos, retry)
	w.nextTag++
	r = &Request{Tag: w.nextTag, Pos: pos, Sample: sample, Split: k, Bytes: b, Est: b, CPU: c}
	if c == 0 && s.lane != nil {
		r.Raw = b
		w.RawFlight += b
	}
	if s.Now != nil {
		r.Sent = s.Now()
	}
	w.Outstanding[r.Tag] = r
	w.Count++
	w.laneCount[s.laneOf(pos)]++
	w.Bytes += b
	w.CPU += c
	return r, nil, false
}

// ask is a position's request as est and CPUOf price it.
type ask struct {
	bytes  int64 // the estimated wire bytes
	sample uint64
	split  int
	cpu    int64 // the storage CPU estimate (ns), 0 for a raw fetch
}

// roomLocked prices pos and reports whether w may take it now: not past
// the strict-order gate, an offload within MaxCPU (the first one always),
// a raw fetch of a two-lane epoch within MaxRawFlight (the first one
// always).
func (s *Schedule) roomLocked(w *Window, pos int, est func(pos int) (int64, uint64, int)) (q ask, ok bool) {
	if s.gate > 0 && pos >= s.deliverNext+s.gate {
		return q, false
	}
	q.bytes, q.sample, q.split = est(pos)
	if s.CPUOf != nil && q.split != 0 {
		q.cpu = s.CPUOf(pos, q.split)
	}
	if q.cpu > 0 {
		return q, w.MaxCPU <= 0 || w.CPU == 0 || w.CPU+q.cpu <= w.MaxCPU
	}
	return q, s.lane == nil || w.MaxRawFlight <= 0 || w.RawFlight == 0 || w.RawFlight+q.bytes <= w.MaxRawFlight
}

// Claim accepts the response for tag on w's current stream, whose wire
// size is actual. It returns nil for an unknown tag or a position already
// received (dup reports the latter). The request keeps its window slot
// and bytes until release; its storage CPU leaves the window now.
func (s *Schedule) Claim(w *Window, tag uint64, actual int64) (r *Request, dup bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r = w.Outstanding[tag]
	if r == nil {
		return nil, false
	}
	delete(w.Outstanding, tag)
	if s.received[r.Pos] {
		s.freeLocked(w, r)
		s.broadcastLocked()
		return nil, true
	}
	w.Bytes += actual - r.Bytes
	r.Bytes = actual
	s.receivedLocked(r.Pos)
	wake := s.nRecv == s.n
	if r.Raw != 0 {
		w.RawFlight -= r.Raw
		r.Raw = 0
		wake = true
	}
	if r.CPU != 0 {
		// The storage agent's work is done: its CPU leaves the window
		// now, not once a worker finished the sample. Workers busy with
		// other samples (cache hits) would otherwise keep the storage
		// agent's queue short and the link waiting on it.
		w.CPU -= r.CPU
		r.CPU = 0
		wake = true
	}
	if wake {
		s.broadcastLocked()
	}
	return r, false
}

// RetryTag puts the request for tag on w back into the schedule after a
// transient per-sample error (the storage agent's queue deadline), at most
// limit times per position; it reports whether it did. Unlike claim then
// requeue, the position never counts as received meanwhile, so no fetcher
// can see the epoch complete while it is owed.
func (s *Schedule) RetryTag(w *Window, tag uint64, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := w.Outstanding[tag]
	if r == nil || s.received[r.Pos] || s.retries[r.Pos] >= limit {
		return false
	}
	if s.retries == nil {
		s.retries = map[int]int{}
	}
	s.retries[r.Pos]++
	delete(w.Outstanding, tag)
	s.freeLocked(w, r)
	if !r.Hedged { // a hedged position is owed by the schedule already
		s.requeueLocked(r.Pos)
	}
	s.broadcastLocked()
	return true
}

// Release frees r's window slot once its result left the worker.
func (s *Schedule) Release(w *Window, r *Request) {
	s.mu.Lock()
	s.freeLocked(w, r)
	s.broadcastLocked()
	s.mu.Unlock()
}

// Requeue returns every request outstanding on w's failed stream to the
// schedule and frees their slots. It returns how many.
func (s *Schedule) Requeue(w *Window) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(w.Outstanding)
	for tag, r := range w.Outstanding {
		delete(w.Outstanding, tag)
		s.freeLocked(w, r)
		if !r.Hedged && !s.received[r.Pos] {
			s.requeueLocked(r.Pos)
		}
	}
	s.broadcastLocked()
	return n
}

// Hedge puts the positions of w's outstanding requests back into the
// schedule, first in line, while they stay outstanding on w (a stalled
// stream): any fetcher may then take them, and whichever response comes
// first is accepted (claim drops the other as a duplicate). It returns how
// many positions it put back.
func (s *Schedule) Hedge(w *Window) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range w.Outstanding {
		if r.Hedged || s.received[r.Pos] {
			continue
		}
		r.Hedged = true
		s.requeueLocked(r.Pos)
		n++
	}
	if n > 0 {
		s.broadcastLocked()
	}
	return n
}

// OldestSent is the send time of w's oldest outstanding request; ok is
// false when none is outstanding.
func (s *Schedule) OldestSent(w *Window) (t time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range w.Outstanding {
		if !ok || r.Sent.Before(t) {
			t, ok = r.Sent, true
		}
	}
	return t, ok
}

// State reports whether every position was received and, if not, a
// channel closed on the next change.
func (s *Schedule) State() (done bool, sig <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nRecv == s.n, s.sig
}

// Outstanding is the number of requests awaiting a response on w.
func (s *Schedule) Outstanding(w *Window) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(w.Outstanding)
}

// Progress is how many of the schedule's positions were received.
func (s *Schedule) Progress() (received, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nRecv, s.n
}

// Complete reports whether every position was received.
func (s *Schedule) Complete() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nRecv == s.n
}

// Delivered moves the strict-order gate: positions below pos are out of
// the reorder buffer.
func (s *Schedule) Delivered(pos int) {
	s.mu.Lock()
	s.deliverNext = pos
	s.broadcastLocked()
	s.mu.Unlock()
}

// SetMaxBytes sets w's byte bound.
func (s *Schedule) SetMaxBytes(w *Window, b int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b > w.MaxBytes {
		s.broadcastLocked()
	}
	w.MaxBytes = b
}

// GiveUp marks w's fetcher dead and reports how many are left. A group
// none of whose fetchers is left falls back to its owners still alive; a
// group with none of those either is orphaned: its positions still owed
// are taken out of the schedule and returned as requests on w (counted in
// its window until released), for the caller to report as unavailable.
func (s *Schedule) GiveUp(w *Window) (alive int, orphans []*Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aliveMask&(1<<w.Idx) != 0 {
		s.aliveMask &^= 1 << w.Idx
		s.alive--
	}
	if s.alive > 0 {
		for i := range s.groups {
			g := &s.groups[i]
			if g.owed == 0 || g.mask&s.aliveMask != 0 {
				continue
			}
			if g.owners&s.aliveMask != 0 {
				g.mask = g.owners & s.aliveMask
				continue
			}
			orphans = append(orphans, s.orphanLocked(w, g)...)
		}
	}
	s.broadcastLocked()
	return s.alive, orphans
}

// Unowned takes the positions no fetcher holds out of the schedule and
// registers them on w, like giveUp's orphans.
func (s *Schedule) Unowned(w *Window) []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Request
	for i := range s.groups {
		if g := &s.groups[i]; g.owners == 0 {
			out = append(out, s.orphanLocked(w, g)...)
		}
	}
	return out
}

// orphanLocked takes every position of g still owed and not outstanding
// on a live window (a dead one's were requeued) and registers it on w.
func (s *Schedule) orphanLocked(w *Window, g *group) []*Request {
	var out []*Request
	take := func(pos int) {
		if s.received[pos] {
			return
		}
		w.nextTag++
		r := &Request{Tag: w.nextTag, Pos: pos}
		w.Outstanding[r.Tag] = r
		w.Count++
		w.laneCount[s.laneOf(pos)]++
		out = append(out, r)
	}
	for g.retry.Len() > 0 {
		take(heap.Pop(&g.retry).(int))
	}
	for l := range 2 {
		for ; g.cursor[l] < len(g.lanes[l]); g.cursor[l]++ {
			take(g.lanes[l][g.cursor[l]])
		}
	}
	return out
}

// posHeap is a min-heap of positions, so retries go out in permutation
// order (which strict order needs to make progress).
type posHeap []int

func (h posHeap) Len() int           { return len(h) }
func (h posHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h posHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *posHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *posHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Resplit re-plans the positions no fetcher has taken yet, under the
// schedule's lock (a plan that takes over a running epoch): set(pos) gives
// each its new split (the caller's state, which Take's estimate reads under
// the same lock) and reports whether it runs ops on storage; each moves to
// the lane of its kind, in permutation order (undoing Order). Positions
// taken before (outstanding, received, or put back for a retry) keep their
// lane. Then
// then(received) runs, still under the lock, with each position's received
// flag; it may set CPUOf and the windows' bounds. It returns how many
// positions were re-planned.
func (s *Schedule) Resplit(set func(pos int) bool, then func(received []bool)) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := 0
	for gi := range s.groups {
		g := &s.groups[gi]
		var rest []int
		for l := range 2 {
			rest = append(rest, g.lanes[l][g.cursor[l]:]...)
			g.lanes[l] = g.lanes[l][:g.cursor[l]:g.cursor[l]]
		}
		slices.Sort(rest)
		for _, pos := range rest {
			l := 0
			if set(pos) {
				l = 1
			}
			if l != s.laneOf(pos) {
				if s.lane == nil {
					s.lane = make([]uint8, s.n)
				}
				s.lane[pos] = uint8(l)
			}
			g.lanes[l] = append(g.lanes[l], pos)
		}
		left += len(rest)
	}
	if then != nil {
		then(s.received)
	}
	s.broadcastLocked()
	return left
}

// Order makes each lane hand out its positions not yet taken in
// ascending key (ties in permutation order) instead of permutation order;
// a later Resplit puts them back in permutation order. Batches are in
// completion order, so nothing else changes; with the strict-order gate
// it does nothing (a lane must then go in permutation order, or its next
// position could wait on one behind it).
func (s *Schedule) Order(key func(pos int) float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate > 0 {
		return
	}
	for gi := range s.groups {
		g := &s.groups[gi]
		for l := range 2 {
			rest := g.lanes[l][g.cursor[l]:]
			slices.SortStableFunc(rest, func(a, b int) int { return cmp.Compare(key(a), key(b)) })
		}
	}
	s.broadcastLocked()
}

// InFlight is w's requests outstanding and their estimated response
// bytes.
func (s *Schedule) InFlight(w *Window) (count int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return w.Count, w.Bytes
}

// Adjust runs fn under the schedule's lock, for it to change w's bounds
// (MaxCount, MaxBytes, MaxCPU, MaxRawFlight), and wakes the fetchers
// waiting for room.
func (s *Schedule) Adjust(w *Window, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
	s.broadcastLocked()
}
