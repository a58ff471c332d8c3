package storageagent

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Fair queueing.
//
// Jobs wait in lanes, one per stream, grouped by peer (the client's
// certificate identity, or its IP address without TLS). Workers take jobs
// round-robin across peers and, within a peer, across its streams, so a
// client that opens many streams gets no more workers than a client with
// one, and a client that floods its stream does not delay another's.
//
// A lane is skipped while its stream has results waiting to be sent above
// streamBufferBytes, or while the agent's buffered results as a whole are
// above globalBufferBytes and this stream has any: a stream whose client
// stops reading keeps its own results and nothing else, and never holds a
// worker (results are handed over into a buffer sized to the stream's
// admission window, so delivering never blocks). Every stream admits at
// most Config.Queue requests at a time (queued, running or unsent), so
// memory is bounded by the stream count times that window.

// Buffered-result bounds (see above).
const (
	streamBufferBytes = 8 << 20
	globalBufferBytes = 128 << 20
)

// fairQueue is one pool's queue: the budgeted workers' or the raw workers'.
type fairQueue struct {
	mu       sync.Mutex
	cond     *sync.Cond
	lanes    map[*fetchStream]*lane
	peers    map[string]*peerLanes
	ring     []*peerLanes // peers with queued jobs, in round-robin order
	turn     int          // the ring position served next
	queued   atomic.Int64
	stopped  bool
	runnable func(*fetchStream) bool
}

// peerLanes are one peer's lanes with queued jobs.
type peerLanes struct {
	key   string
	lanes []*lane
	next  int
}

// lane is one stream's queued jobs, oldest first.
type lane struct {
	st   *fetchStream
	jobs []*job
}

func newFairQueue(runnable func(*fetchStream) bool) *fairQueue {
	q := &fairQueue{lanes: map[*fetchStream]*lane{}, peers: map[string]*peerLanes{}, runnable: runnable}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push queues j behind its stream's earlier jobs.
func (q *fairQueue) push(j *job) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lanes[j.st]
	if l == nil {
		l = &lane{st: j.st}
		q.lanes[j.st] = l
		p := q.peers[j.st.peer]
		if p == nil {
			p = &peerLanes{key: j.st.peer}
			q.peers[p.key] = p
			q.ring = append(q.ring, p)
		}
		p.lanes = append(p.lanes, l)
	}
	l.jobs = append(l.jobs, j)
	q.queued.Add(1)
	q.cond.Signal()
}

// next blocks until a runnable job is queued and returns it, or returns nil
// once the queue is stopped.
func (q *fairQueue) next() *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.stopped {
			return nil
		}
		if j := q.pickLocked(); j != nil {
			return j
		}
		q.cond.Wait()
	}
}

// tryNext takes the next runnable job without waiting; nil when none is
// queued or the queue is stopped.
func (q *fairQueue) tryNext() *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return nil
	}
	return q.pickLocked()
}

// pickLocked takes the next runnable job round-robin, or returns nil.
func (q *fairQueue) pickLocked() *job {
	for i := range len(q.ring) {
		pi := (q.turn + i) % len(q.ring)
		p := q.ring[pi]
		for k := range len(p.lanes) {
			li := (p.next + k) % len(p.lanes)
			l := p.lanes[li]
			if !q.runnable(l.st) {
				continue
			}
			j := l.jobs[0]
			l.jobs[0] = nil
			l.jobs = l.jobs[1:]
			q.queued.Add(-1)
			if len(l.jobs) == 0 {
				q.removeLane(p, li)
			} else {
				p.next = li + 1
			}
			if len(p.lanes) == 0 {
				q.removePeer(pi)
			} else {
				q.turn = pi + 1
			}
			return j
		}
	}
	return nil
}

// removeLane drops p's lane at li; the lane after it is served next.
func (q *fairQueue) removeLane(p *peerLanes, li int) {
	delete(q.lanes, p.lanes[li].st)
	p.lanes = slices.Delete(p.lanes, li, li+1)
	p.next = li
}

// removePeer drops the ring's peer at pi; the peer after it is served next.
func (q *fairQueue) removePeer(pi int) {
	delete(q.peers, q.ring[pi].key)
	q.ring = slices.Delete(q.ring, pi, pi+1)
	q.turn = pi
}

// drop removes st's queued jobs and returns them.
func (q *fairQueue) drop(st *fetchStream) []*job {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lanes[st]
	if l == nil {
		return nil
	}
	p := q.peers[st.peer]
	li := slices.Index(p.lanes, l)
	q.removeLane(p, li)
	if len(p.lanes) == 0 {
		q.removePeer(slices.Index(q.ring, p))
	}
	q.queued.Add(-int64(len(l.jobs)))
	return l.jobs
}

// wake tells waiting workers that a stream may have become runnable.
func (q *fairQueue) wake() {
	q.mu.Lock()
	q.cond.Broadcast()
	q.mu.Unlock()
}

// stop makes next return nil from now on.
func (q *fairQueue) stop() {
	q.mu.Lock()
	q.stopped = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// len is the number of queued jobs.
func (q *fairQueue) len() int { return int(q.queued.Load()) }

// stallWatch records when each worker of a pool took its current job, to
// tell a pool whose workers are all stuck (health goes NOT_SERVING) from one
// that is merely busy.
type stallWatch struct {
	since []atomic.Int64 // unix nanoseconds; 0 while the worker is idle
}

func newStallWatch(workers int) *stallWatch {
	return &stallWatch{since: make([]atomic.Int64, workers)}
}

// stalled reports whether every worker has been on its current job for
// longer than after, and since when the most recent of them has.
func (w *stallWatch) stalled(now time.Time, after time.Duration) (bool, time.Duration) {
	var newest int64
	for i := range w.since {
		t := w.since[i].Load()
		if t == 0 {
			return false, 0
		}
		newest = max(newest, t)
	}
	age := now.Sub(time.Unix(0, newest))
	return len(w.since) > 0 && age > after, age
}
