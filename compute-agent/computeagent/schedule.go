package computeagent

import (
	"container/heap"
	"sync"
	"time"
)

// schedule is an epoch's shared state: which positions of the permutation
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
type schedule struct {
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
	alive       int         // fetchers not given up
	aliveMask   uint64      // their bits (window.idx)
	retries     map[int]int // transient per-sample errors so far, by position
	// now stamps each request's send time (request.sent). Nil leaves it
	// zero.
	now func() time.Time
	// cpuOf, when set, is the storage CPU estimate (ns) of requesting pos
	// at split k != 0, which window.maxCPU bounds.
	cpuOf func(pos, k int) int64
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

// maxFetchers bounds the storage agents one epoch uses (a window's bit).
const maxFetchers = 64

// allFetchers is the mask of n fetchers.
func allFetchers(n int) uint64 {
	if n >= maxFetchers {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// newSchedule schedules n positions that any of fetchers may take.
// offloaded, when not nil, marks the positions that run ops on storage;
// with both kinds present the schedule uses two lanes.
func newSchedule(n, gate, fetchers int, offloaded []bool) *schedule {
	return newPlacedSchedule(n, gate, fetchers, offloaded, placement{})
}

// placement says which fetchers (bit i: the i-th storage agent) may take
// each position; a nil slice leaves every position to every fetcher.
type placement struct {
	// owners[pos]: the agents holding pos's sample.
	owners []uint64
	// bound[pos], a subset of owners[pos]: the only agents that take pos
	// while one of them is alive (round-robin placement); 0 = owners.
	bound []uint64
}

// newPlacedSchedule is newSchedule under a placement. Positions of equal
// (owners, bound) form a group.
func newPlacedSchedule(n, gate, fetchers int, offloaded []bool, pl placement) *schedule {
	all := allFetchers(fetchers)
	s := &schedule{n: n, sig: make(chan struct{}), received: make([]bool, n), gate: gate, alive: fetchers, aliveMask: all}
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
	if pl.owners != nil || pl.bound != nil {
		s.group = make([]uint32, n)
	}
	at := func(m []uint64, pos int, def uint64) uint64 {
		if m == nil {
			return def
		}
		return m[pos] & all
	}
	for pos := range n {
		k := key{at(pl.owners, pos, all), at(pl.bound, pos, 0)}
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
func (s *schedule) groupOf(pos int) *group {
	if s.group == nil {
		return &s.groups[0]
	}
	return &s.groups[s.group[pos]]
}

// laneOf is pos's lane.
func (s *schedule) laneOf(pos int) int {
	if s.lane == nil {
		return 0
	}
	return int(s.lane[pos])
}

// serves reports whether w may take g's positions.
func (g *group) serves(w *window) bool { return g.mask&(1<<w.idx) != 0 }

// nextLocked is the next position w may take, first from the retries, or
// -1; retry reports whether it is a retry. Positions of lane skip (-1:
// none) are passed over.
func (s *schedule) nextLocked(w *window, skip int) (pos int, retry bool) {
	best := -1
	for i := range s.groups {
		g := &s.groups[i]
		if !g.serves(w) {
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
		if !g.serves(w) {
			continue
		}
		both := g.cursor[0] < len(g.lanes[0]) && g.cursor[1] < len(g.lanes[1])
		for l := range 2 {
			if l == skip || g.cursor[l] >= len(g.lanes[l]) || (both && w.laneCount[l] >= (w.maxCount+1)/2) {
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
func (s *schedule) advanceLocked(pos int, retry bool) {
	g := s.groupOf(pos)
	if retry {
		heap.Pop(&g.retry)
		return
	}
	g.cursor[s.laneOf(pos)]++
}

// requeueLocked puts pos back into its group's retries.
func (s *schedule) requeueLocked(pos int) {
	heap.Push(&s.groupOf(pos).retry, pos)
}

// receivedLocked marks pos received.
func (s *schedule) receivedLocked(pos int) {
	s.received[pos] = true
	s.nRecv++
	s.groupOf(pos).owed--
}

// freeLocked gives r's window slot back.
func (s *schedule) freeLocked(w *window, r *request) {
	w.count--
	w.laneCount[s.laneOf(r.pos)]--
	w.bytes -= r.bytes
	w.cpu -= r.cpu
}

// broadcastLocked wakes every waiter.
func (s *schedule) broadcastLocked() {
	close(s.sig)
	s.sig = make(chan struct{})
}

// request is one sample requested on a stream.
type request struct {
	tag    uint64
	pos    int
	sample uint64
	split  int
	bytes  int64 // window bytes held: the estimate, then the actual size
	cpu    int64 // window storage CPU held: the estimate (ns)
	est    int64 // the estimate
	sent   time.Time
	// hedged marks a request of a stalled stream whose position was put
	// back into the schedule while the request stayed outstanding: if the
	// stalled stream answers after all, the first response wins and the
	// other is dropped as a duplicate.
	hedged bool
}

// window is one fetcher's share of the schedule; its fields are guarded by
// schedule.mu.
type window struct {
	idx       int // the fetcher's index: bit idx of a group's masks
	maxCount  int
	maxBytes  int64
	count     int
	laneCount [2]int // count by lane
	bytes     int64
	// cpu is the storage CPU estimate (ns) of the requests in flight;
	// maxCPU, when positive, bounds it (fetcher.pace).
	cpu, maxCPU int64
	nextTag     uint64
	outstanding map[uint64]*request // by tag, on the current stream
}

// take hands w the next position if its window has room, registering the
// request as outstanding. Otherwise it returns a channel that is closed on
// the next change; done reports that every position was received.
func (s *schedule) take(w *window, est func(pos int) (int64, uint64, int)) (r *request, wait <-chan struct{}, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nRecv == s.n {
		return nil, nil, true
	}
	pos, retry := s.nextLocked(w, -1)
	if pos < 0 || (s.gate > 0 && pos >= s.deliverNext+s.gate) || w.count >= w.maxCount {
		return nil, s.sig, false
	}
	b, sample, k := est(pos)
	var c int64
	if s.cpuOf != nil && k != 0 {
		c = s.cpuOf(pos, k)
	}
	if c > 0 && w.maxCPU > 0 && w.cpu > 0 && w.cpu+c > w.maxCPU {
		// The agent's CPU has enough queued: a raw position instead, if
		// the other lane has one (the link may be idle).
		if p2, r2 := s.nextLocked(w, s.laneOf(pos)); p2 >= 0 && s.laneOf(p2) != s.laneOf(pos) {
			pos, retry = p2, r2
			b, sample, k = est(pos)
			c = 0
			if s.cpuOf != nil && k != 0 {
				c = s.cpuOf(pos, k)
			}
			if c > 0 || (s.gate > 0 && pos >= s.deliverNext+s.gate) {
				return nil, s.sig, false
			}
		} else {
			return nil, s.sig, false
		}
	}
	if w.count > 0 && w.bytes+b > w.maxBytes {
		return nil, s.sig, false
	}
	s.advanceLocked(pos, retry)
	w.nextTag++
	r = &request{tag: w.nextTag, pos: pos, sample: sample, split: k, bytes: b, est: b, cpu: c}
	if s.now != nil {
		r.sent = s.now()
	}
	w.outstanding[r.tag] = r
	w.count++
	w.laneCount[s.laneOf(pos)]++
	w.bytes += b
	w.cpu += c
	return r, nil, false
}

// claim accepts the response for tag on w's current stream, whose wire
// size is actual. It returns nil for an unknown tag or a position already
// received (dup reports the latter). The request keeps its window slot
// until release.
func (s *schedule) claim(w *window, tag uint64, actual int64) (r *request, dup bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r = w.outstanding[tag]
	if r == nil {
		return nil, false
	}
	delete(w.outstanding, tag)
	if s.received[r.pos] {
		s.freeLocked(w, r)
		s.broadcastLocked()
		return nil, true
	}
	w.bytes += actual - r.bytes
	r.bytes = actual
	s.receivedLocked(r.pos)
	if s.nRecv == s.n {
		s.broadcastLocked()
	}
	return r, false
}

// retryTag puts the request for tag on w back into the schedule after a
// transient per-sample error (the storage agent's queue deadline), at most
// limit times per position; it reports whether it did. Unlike claim then
// requeue, the position never counts as received meanwhile, so no fetcher
// can see the epoch complete while it is owed.
func (s *schedule) retryTag(w *window, tag uint64, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := w.outstanding[tag]
	if r == nil || s.received[r.pos] || s.retries[r.pos] >= limit {
		return false
	}
	if s.retries == nil {
		s.retries = map[int]int{}
	}
	s.retries[r.pos]++
	delete(w.outstanding, tag)
	s.freeLocked(w, r)
	if !r.hedged { // a hedged position is owed by the schedule already
		s.requeueLocked(r.pos)
	}
	s.broadcastLocked()
	return true
}

// release frees r's window slot once its result left the worker.
func (s *schedule) release(w *window, r *request) {
	s.mu.Lock()
	s.freeLocked(w, r)
	s.broadcastLocked()
	s.mu.Unlock()
}

// requeue returns every request outstanding on w's failed stream to the
// schedule and frees their slots. It returns how many.
func (s *schedule) requeue(w *window) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(w.outstanding)
	for tag, r := range w.outstanding {
		delete(w.outstanding, tag)
		s.freeLocked(w, r)
		if !r.hedged && !s.received[r.pos] {
			s.requeueLocked(r.pos)
		}
	}
	s.broadcastLocked()
	return n
}

// hedge puts the positions of w's outstanding requests back into the
// schedule, first in line, while they stay outstanding on w (a stalled
// stream): any fetcher may then take them, and whichever response comes
// first is accepted (claim drops the other as a duplicate). It returns how
// many positions it put back.
func (s *schedule) hedge(w *window) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range w.outstanding {
		if r.hedged || s.received[r.pos] {
			continue
		}
		r.hedged = true
		s.requeueLocked(r.pos)
		n++
	}
	if n > 0 {
		s.broadcastLocked()
	}
	return n
}

// oldestSent is the send time of w's oldest outstanding request; ok is
// false when none is outstanding.
func (s *schedule) oldestSent(w *window) (t time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range w.outstanding {
		if !ok || r.sent.Before(t) {
			t, ok = r.sent, true
		}
	}
	return t, ok
}

// state reports whether every position was received and, if not, a
// channel closed on the next change.
func (s *schedule) state() (done bool, sig <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nRecv == s.n, s.sig
}

// outstanding is the number of requests awaiting a response on w.
func (s *schedule) outstanding(w *window) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(w.outstanding)
}

// complete reports whether every position was received.
func (s *schedule) complete() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nRecv == s.n
}

// delivered moves the strict-order gate: positions below pos are out of
// the reorder buffer.
func (s *schedule) delivered(pos int) {
	s.mu.Lock()
	s.deliverNext = pos
	s.broadcastLocked()
	s.mu.Unlock()
}

// setMaxBytes sets w's byte bound.
func (s *schedule) setMaxBytes(w *window, b int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b > w.maxBytes {
		s.broadcastLocked()
	}
	w.maxBytes = b
}

// giveUp marks w's fetcher dead and reports how many are left. A group
// none of whose fetchers is left falls back to its owners still alive; a
// group with none of those either is orphaned: its positions still owed
// are taken out of the schedule and returned as requests on w (counted in
// its window until released), for the caller to report as unavailable.
func (s *schedule) giveUp(w *window) (alive int, orphans []*request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aliveMask&(1<<w.idx) != 0 {
		s.aliveMask &^= 1 << w.idx
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

// unowned takes the positions no fetcher holds out of the schedule and
// registers them on w, like giveUp's orphans.
func (s *schedule) unowned(w *window) []*request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*request
	for i := range s.groups {
		if g := &s.groups[i]; g.owners == 0 {
			out = append(out, s.orphanLocked(w, g)...)
		}
	}
	return out
}

// orphanLocked takes every position of g still owed and not outstanding
// on a live window (a dead one's were requeued) and registers it on w.
func (s *schedule) orphanLocked(w *window, g *group) []*request {
	var out []*request
	take := func(pos int) {
		if s.received[pos] {
			return
		}
		w.nextTag++
		r := &request{tag: w.nextTag, pos: pos}
		w.outstanding[r.tag] = r
		w.count++
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
