package budget

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Fair queueing.
//
// Jobs wait in lanes, one per stream, grouped by client (the storage agent
// names a client by its certificate identity, or its IP address without
// TLS). Workers take jobs round-robin across clients and, within a client,
// across its streams, so a client that opens many streams gets no more
// workers than a client with one, and a client that floods its stream does
// not delay another's. A lane the caller's runnable function refuses (the
// storage agent's: its client leaves too many results unread) is skipped
// until Wake says it may have become runnable.

// Queue is one worker pool's queue of jobs J, in lanes keyed by stream S.
// Its methods are safe for concurrent use.
type Queue[S comparable, J any] struct {
	mu       sync.Mutex
	cond     *sync.Cond
	lanes    map[S]*lane[S, J]
	clients  map[string]*clientLanes[S, J]
	ring     []*clientLanes[S, J] // clients with queued jobs, in round-robin order
	turn     int                  // the ring position served next
	queued   atomic.Int64
	stopped  bool
	runnable func(S) bool
}

// clientLanes are one client's lanes with queued jobs.
type clientLanes[S comparable, J any] struct {
	key   string
	lanes []*lane[S, J]
	next  int
}

// lane is one stream's queued jobs, oldest first.
type lane[S comparable, J any] struct {
	st     S
	client string
	jobs   []J
}

// NewQueue returns an empty queue whose workers take a stream's jobs only
// while runnable reports true for it.
func NewQueue[S comparable, J any](runnable func(S) bool) *Queue[S, J] {
	q := &Queue[S, J]{lanes: map[S]*lane[S, J]{}, clients: map[string]*clientLanes[S, J]{}, runnable: runnable}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Push queues j behind the earlier jobs of stream st, which belongs to
// client.
func (q *Queue[S, J]) Push(st S, client string, j J) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lanes[st]
	if l == nil {
		l = &lane[S, J]{st: st, client: client}
		q.lanes[st] = l
		c := q.clients[client]
		if c == nil {
			c = &clientLanes[S, J]{key: client}
			q.clients[client] = c
			q.ring = append(q.ring, c)
		}
		c.lanes = append(c.lanes, l)
	}
	l.jobs = append(l.jobs, j)
	q.queued.Add(1)
	q.cond.Signal()
}

// Next blocks until a runnable job is queued and returns it, or returns
// false once the queue is stopped.
func (q *Queue[S, J]) Next() (J, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.stopped {
			var none J
			return none, false
		}
		if j, ok := q.pickLocked(); ok {
			return j, true
		}
		q.cond.Wait()
	}
}

// TryNext takes the next runnable job without waiting; false when none is
// queued or the queue is stopped.
func (q *Queue[S, J]) TryNext() (J, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		var none J
		return none, false
	}
	return q.pickLocked()
}

// pickLocked takes the next runnable job round-robin, if there is one.
func (q *Queue[S, J]) pickLocked() (J, bool) {
	for i := range len(q.ring) {
		ci := (q.turn + i) % len(q.ring)
		c := q.ring[ci]
		for k := range len(c.lanes) {
			li := (c.next + k) % len(c.lanes)
			l := c.lanes[li]
			if !q.runnable(l.st) {
				continue
			}
			j := l.jobs[0]
			var none J
			l.jobs[0] = none
			l.jobs = l.jobs[1:]
			q.queued.Add(-1)
			if len(l.jobs) == 0 {
				q.removeLane(c, li)
			} else {
				c.next = li + 1
			}
			if len(c.lanes) == 0 {
				q.removeClient(ci)
			} else {
				q.turn = ci + 1
			}
			return j, true
		}
	}
	var none J
	return none, false
}

// removeLane drops c's lane at li; the lane after it is served next.
func (q *Queue[S, J]) removeLane(c *clientLanes[S, J], li int) {
	delete(q.lanes, c.lanes[li].st)
	c.lanes = slices.Delete(c.lanes, li, li+1)
	c.next = li
}

// removeClient drops the ring's client at ci; the client after it is
// served next.
func (q *Queue[S, J]) removeClient(ci int) {
	delete(q.clients, q.ring[ci].key)
	q.ring = slices.Delete(q.ring, ci, ci+1)
	q.turn = ci
}

// Drop removes st's queued jobs and returns them.
func (q *Queue[S, J]) Drop(st S) []J {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lanes[st]
	if l == nil {
		return nil
	}
	c := q.clients[l.client]
	q.removeLane(c, slices.Index(c.lanes, l))
	if len(c.lanes) == 0 {
		q.removeClient(slices.Index(q.ring, c))
	}
	q.queued.Add(-int64(len(l.jobs)))
	return l.jobs
}

// Wake tells waiting workers that a stream may have become runnable.
func (q *Queue[S, J]) Wake() {
	q.mu.Lock()
	q.cond.Broadcast()
	q.mu.Unlock()
}

// Stop makes Next return false from now on.
func (q *Queue[S, J]) Stop() {
	q.mu.Lock()
	q.stopped = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// Len is the number of queued jobs.
func (q *Queue[S, J]) Len() int { return int(q.queued.Load()) }
