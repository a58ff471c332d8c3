package budget

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Fair queueing.
//
// Requests wait in lanes, one per stream, grouped by client (the storage
// agent names a client by its certificate identity, or its IP address
// without TLS) and the clients by job (the job name a compute agent sends,
// see Jobs). Workers serve the jobs in proportion to their weights by
// start-time fair queueing: each job has a virtual time, the worker time
// it was charged over its weight, and a worker takes the next request of
// the job with the least virtual time that has a runnable one. A request
// is charged when it is taken, at its job's running mean cost, and
// corrected by what it cost once it ran (Charge), so that two workers
// taking requests at once do not both take the same job's. A job that
// comes back after a pause starts at the virtual time of the job served
// last: it cannot save up turns while idle. Within a job, workers take
// requests round-robin across its clients and, within a client, across
// its streams, so a client that opens many streams gets no more workers
// than a client with one, and a client that floods its stream does not
// delay another's. A lane the caller's runnable function refuses (the
// storage agent's: its client leaves too many results unread) is skipped
// until Wake says it may have become runnable.

const (
	// defaultJobCost is a job's running mean cost (ns) before any of its
	// requests was charged.
	defaultJobCost = 1e6
	// costWeight is the weight of a new charge in a job's running mean.
	costWeight = 1.0 / 8
	// keptJobs bounds the idle jobs whose virtual time and mean cost the
	// queue keeps beyond those with queued requests.
	keptJobs = 64
)

// Queue is one worker pool's queue of requests J, in lanes keyed by stream
// S. Its methods are safe for concurrent use.
type Queue[S comparable, J any] struct {
	mu       sync.Mutex
	cond     *sync.Cond
	lanes    map[S]*lane[S, J]
	jobs     map[string]*jobLanes[S, J] // with queued requests, and up to keptJobs idle
	ring     []*jobLanes[S, J]          // jobs with queued requests
	vnow     float64                    // the virtual time of the job served last
	gen      uint64                     // pickLocked's pass, to mark the jobs it tried
	queued   atomic.Int64
	stopped  bool
	runnable func(S) bool
}

// jobLanes is one job's clients, and its place in the weighted order.
type jobLanes[S comparable, J any] struct {
	key     string
	weight  float64
	vt      float64 // worker ns charged / weight
	cost    float64 // running mean ns per request
	clients map[string]*clientLanes[S, J]
	ring    []*clientLanes[S, J] // clients with queued requests, round-robin
	turn    int                  // the ring position served next
	tried   uint64
}

// clientLanes are one client's lanes with queued requests, within a job.
type clientLanes[S comparable, J any] struct {
	key   string
	lanes []*lane[S, J]
	next  int
}

// lane is one stream's queued requests, oldest first.
type lane[S comparable, J any] struct {
	st     S
	job    *jobLanes[S, J]
	client *clientLanes[S, J]
	reqs   []J
}

// NewQueue returns an empty queue whose workers take a stream's requests
// only while runnable reports true for it.
func NewQueue[S comparable, J any](runnable func(S) bool) *Queue[S, J] {
	q := &Queue[S, J]{lanes: map[S]*lane[S, J]{}, jobs: map[string]*jobLanes[S, J]{}, runnable: runnable}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Push queues j behind the earlier requests of stream st, which belongs to
// client, all of whose streams are one job of weight 1.
func (q *Queue[S, J]) Push(st S, client string, j J) { q.PushJob(st, "", 1, client, j) }

// PushJob queues j behind the earlier requests of stream st, which belongs
// to client within job; weight is the job's (not positive: 1). A stream
// stays in the job and client of its first request.
func (q *Queue[S, J]) PushJob(st S, job string, weight float64, client string, j J) {
	if !(weight > 0) {
		weight = 1
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lanes[st]
	if l == nil {
		jl := q.jobs[job]
		if jl == nil {
			q.pruneLocked()
			jl = &jobLanes[S, J]{key: job, cost: defaultJobCost, clients: map[string]*clientLanes[S, J]{}}
			q.jobs[job] = jl
		}
		jl.weight = weight
		if len(jl.ring) == 0 {
			jl.vt = max(jl.vt, q.vnow) // no credit for the time it was idle
			q.ring = append(q.ring, jl)
		}
		c := jl.clients[client]
		if c == nil {
			c = &clientLanes[S, J]{key: client}
			jl.clients[client] = c
			jl.ring = append(jl.ring, c)
		}
		l = &lane[S, J]{st: st, job: jl, client: c}
		q.lanes[st] = l
		c.lanes = append(c.lanes, l)
	}
	l.reqs = append(l.reqs, j)
	q.queued.Add(1)
	q.cond.Signal()
}

// pruneLocked forgets idle jobs beyond keptJobs.
func (q *Queue[S, J]) pruneLocked() {
	if len(q.jobs) < len(q.ring)+keptJobs {
		return
	}
	for k, jl := range q.jobs {
		if len(jl.ring) == 0 {
			delete(q.jobs, k)
		}
	}
}

// Charge corrects job's virtual time by what one of its requests cost
// (ns of worker time) against the mean it was charged when taken, and
// moves the mean towards it. A job the queue has forgotten is ignored.
func (q *Queue[S, J]) Charge(job string, ns float64) {
	if !(ns >= 0) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	jl := q.jobs[job]
	if jl == nil {
		return
	}
	jl.vt += (ns - jl.cost) / jl.weight
	jl.cost += costWeight * (ns - jl.cost)
}

// Next blocks until a runnable request is queued and returns it, or
// returns false once the queue is stopped.
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

// TryNext takes the next runnable request without waiting; false when none
// is queued or the queue is stopped.
func (q *Queue[S, J]) TryNext() (J, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		var none J
		return none, false
	}
	return q.pickLocked()
}

// pickLocked takes the next runnable request of the job with the least
// virtual time that has one, if there is one, and charges the job.
func (q *Queue[S, J]) pickLocked() (J, bool) {
	q.gen++
	for range len(q.ring) {
		var jl *jobLanes[S, J]
		for _, c := range q.ring {
			if c.tried != q.gen && (jl == nil || c.vt < jl.vt) {
				jl = c
			}
		}
		jl.tried = q.gen
		if j, ok := q.pickJobLocked(jl); ok {
			q.vnow = jl.vt
			jl.vt += jl.cost / jl.weight
			return j, true
		}
	}
	var none J
	return none, false
}

// pickJobLocked takes jl's next runnable request round-robin across its
// clients and their streams, if it has one.
func (q *Queue[S, J]) pickJobLocked(jl *jobLanes[S, J]) (J, bool) {
	for i := range len(jl.ring) {
		ci := (jl.turn + i) % len(jl.ring)
		c := jl.ring[ci]
		for k := range len(c.lanes) {
			li := (c.next + k) % len(c.lanes)
			l := c.lanes[li]
			if !q.runnable(l.st) {
				continue
			}
			j := l.reqs[0]
			var none J
			l.reqs[0] = none
			l.reqs = l.reqs[1:]
			q.queued.Add(-1)
			if len(l.reqs) == 0 {
				q.removeLane(l, li)
			} else {
				c.next = li + 1
				jl.turn = ci + 1
			}
			return j, true
		}
	}
	var none J
	return none, false
}

// removeLane drops lane l, at li among its client's lanes; the lane after
// it is served next, and its client and job leave their rings when it was
// their last.
func (q *Queue[S, J]) removeLane(l *lane[S, J], li int) {
	c, jl := l.client, l.job
	delete(q.lanes, l.st)
	c.lanes = slices.Delete(c.lanes, li, li+1)
	c.next = li
	ci := slices.Index(jl.ring, c)
	if len(c.lanes) > 0 {
		jl.turn = ci + 1
		return
	}
	delete(jl.clients, c.key)
	jl.ring = slices.Delete(jl.ring, ci, ci+1)
	jl.turn = ci
	if len(jl.ring) == 0 {
		q.ring = slices.DeleteFunc(q.ring, func(x *jobLanes[S, J]) bool { return x == jl })
	}
}

// Drop removes st's queued requests and returns them.
func (q *Queue[S, J]) Drop(st S) []J {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lanes[st]
	if l == nil {
		return nil
	}
	q.removeLane(l, slices.Index(l.client.lanes, l))
	q.queued.Add(-int64(len(l.reqs)))
	return l.reqs
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

// Len is the number of queued requests.
func (q *Queue[S, J]) Len() int { return int(q.queued.Load()) }
