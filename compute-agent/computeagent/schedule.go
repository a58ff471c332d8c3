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
// runs 10-15% over max(link, storage) (measured at a quarter of a storage
// core). With lanes each resource always has work queued. Batches are in
// completion order anyway; strict order (the gate) still bounds both
// lanes.
type schedule struct {
	n int

	mu sync.Mutex
	// lanes[l] lists lane l's positions in permutation order; lane[pos] is
	// a position's lane. With one lane, lanes[0] is nil and positions are
	// taken in order.
	lanes    [2][]int
	lane     []uint8
	cursor   [2]int // next index into lanes[l]; with one lane cursor[0] is the first position never taken
	sig      chan struct{}
	retry    posHeap // positions taken and requeued
	received []bool
	nRecv    int
	// In strict order a position is taken only when it lies below
	// deliverNext + gate, which bounds the batcher's reorder buffer.
	gate        int
	deliverNext int
	alive       int         // fetchers not given up
	retries     map[int]int // transient per-sample errors so far, by position
	// now stamps each request's send time (request.sent). Nil leaves it
	// zero.
	now func() time.Time
}

// newSchedule schedules n positions. offloaded, when not nil, marks the
// positions that run ops on storage; with both kinds present the schedule
// uses two lanes.
func newSchedule(n, gate, fetchers int, offloaded []bool) *schedule {
	s := &schedule{n: n, sig: make(chan struct{}), received: make([]bool, n), gate: gate, alive: fetchers}
	var count int
	for _, o := range offloaded {
		if o {
			count++
		}
	}
	if count > 0 && count < n && len(offloaded) == n {
		s.lane = make([]uint8, n)
		for pos, o := range offloaded {
			l := 0
			if o {
				l = 1
			}
			s.lane[pos] = uint8(l)
			s.lanes[l] = append(s.lanes[l], pos)
		}
	}
	return s
}

// laneOf is pos's lane.
func (s *schedule) laneOf(pos int) int {
	if s.lane == nil {
		return 0
	}
	return int(s.lane[pos])
}

// nextLocked is the next position w may take from the lanes, or -1.
func (s *schedule) nextLocked(w *window) int {
	if s.lane == nil {
		if s.cursor[0] < s.n {
			return s.cursor[0]
		}
		return -1
	}
	both := s.cursor[0] < len(s.lanes[0]) && s.cursor[1] < len(s.lanes[1])
	best := -1
	for l := range 2 {
		if s.cursor[l] >= len(s.lanes[l]) || (both && w.laneCount[l] >= (w.maxCount+1)/2) {
			continue
		}
		if pos := s.lanes[l][s.cursor[l]]; best < 0 || pos < best {
			best = pos
		}
	}
	return best
}

// advanceLocked moves the cursor of pos's lane past pos.
func (s *schedule) advanceLocked(pos int) {
	s.cursor[s.laneOf(pos)]++
}

// freeLocked gives r's window slot back.
func (s *schedule) freeLocked(w *window, r *request) {
	w.count--
	w.laneCount[s.laneOf(r.pos)]--
	w.bytes -= r.bytes
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
	maxCount    int
	maxBytes    int64
	count       int
	laneCount   [2]int // count by lane
	bytes       int64
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
	// A hedged position may have been received since it was put back.
	for s.retry.Len() > 0 && s.received[s.retry[0]] {
		heap.Pop(&s.retry)
	}
	pos := -1
	if s.retry.Len() > 0 {
		pos = s.retry[0]
	} else {
		pos = s.nextLocked(w)
	}
	if pos < 0 || (s.gate > 0 && pos >= s.deliverNext+s.gate) || w.count >= w.maxCount {
		return nil, s.sig, false
	}
	b, sample, k := est(pos)
	if w.count > 0 && w.bytes+b > w.maxBytes {
		return nil, s.sig, false
	}
	if s.retry.Len() > 0 {
		heap.Pop(&s.retry)
	} else {
		s.advanceLocked(pos)
	}
	w.nextTag++
	r = &request{tag: w.nextTag, pos: pos, sample: sample, split: k, bytes: b, est: b}
	if s.now != nil {
		r.sent = s.now()
	}
	w.outstanding[r.tag] = r
	w.count++
	w.laneCount[s.laneOf(pos)]++
	w.bytes += b
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
	s.received[r.pos] = true
	s.nRecv++
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
		heap.Push(&s.retry, r.pos)
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
			heap.Push(&s.retry, r.pos)
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
		heap.Push(&s.retry, r.pos)
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

// giveUp marks one fetcher dead and reports how many are left.
func (s *schedule) giveUp() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.alive--
	s.broadcastLocked()
	return s.alive
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
