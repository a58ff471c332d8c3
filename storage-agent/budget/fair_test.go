package budget

import (
	"slices"
	"strconv"
	"sync"
	"testing"
)

// stream is a test stream: its name, and whether a worker may take its
// jobs.
type stream struct {
	name    string
	blocked bool
}

// drain takes every job TryNext gives and returns them in order.
func drain(q *Queue[*stream, string]) []string {
	var got []string
	for {
		j, ok := q.TryNext()
		if !ok {
			return got
		}
		got = append(got, j)
	}
}

// TestQueueRoundRobin: workers take jobs round-robin across clients and,
// within a client, across its streams, so a client with two streams gets
// no more turns than a client with one, and each stream's jobs come out in
// the order they went in.
func TestQueueRoundRobin(t *testing.T) {
	q := NewQueue[*stream, string](func(*stream) bool { return true })
	a1, a2, b := &stream{name: "a1"}, &stream{name: "a2"}, &stream{name: "b"}
	for i := range 3 {
		q.Push(a1, "alice", "a1."+strconv.Itoa(i))
		q.Push(a2, "alice", "a2."+strconv.Itoa(i))
	}
	for i := range 4 {
		q.Push(b, "bob", "b."+strconv.Itoa(i))
	}
	if q.Len() != 10 {
		t.Fatalf("Len %d after 10 pushes, want 10", q.Len())
	}
	got := drain(q)
	want := []string{"a1.0", "b.0", "a2.0", "b.1", "a1.1", "b.2", "a2.1", "b.3", "a1.2", "a2.2"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if q.Len() != 0 {
		t.Fatalf("Len %d after draining, want 0", q.Len())
	}
}

// TestQueueSkipsBlocked: a stream the runnable function refuses keeps its
// jobs while the others are served, and is served once it is runnable
// again.
func TestQueueSkipsBlocked(t *testing.T) {
	var mu sync.Mutex
	runnable := func(s *stream) bool {
		mu.Lock()
		defer mu.Unlock()
		return !s.blocked
	}
	q := NewQueue[*stream, string](runnable)
	slow, fast := &stream{name: "slow", blocked: true}, &stream{name: "fast"}
	q.Push(slow, "alice", "s0")
	q.Push(fast, "bob", "f0")
	q.Push(fast, "bob", "f1")
	if got := drain(q); !slices.Equal(got, []string{"f0", "f1"}) {
		t.Fatalf("with slow blocked: got %v, want [f0 f1]", got)
	}
	if q.Len() != 1 {
		t.Fatalf("Len %d with one blocked job, want 1", q.Len())
	}
	mu.Lock()
	slow.blocked = false
	mu.Unlock()
	q.Wake()
	if j, ok := q.Next(); !ok || j != "s0" {
		t.Fatalf("after unblocking: got %q, %v, want s0", j, ok)
	}
}

// TestQueueDropAndStop: Drop hands back a stream's queued jobs and leaves
// the others; Stop ends a waiting Next and every later one.
func TestQueueDropAndStop(t *testing.T) {
	q := NewQueue[*stream, string](func(*stream) bool { return true })
	gone, kept := &stream{name: "gone"}, &stream{name: "kept"}
	q.Push(gone, "alice", "g0")
	q.Push(kept, "alice", "k0")
	q.Push(gone, "alice", "g1")
	if got := q.Drop(gone); !slices.Equal(got, []string{"g0", "g1"}) {
		t.Fatalf("Drop: got %v, want [g0 g1]", got)
	}
	if got := q.Drop(gone); got != nil {
		t.Fatalf("second Drop: got %v, want nothing", got)
	}
	if got := drain(q); !slices.Equal(got, []string{"k0"}) {
		t.Fatalf("after Drop: got %v, want [k0]", got)
	}
	q.Push(gone, "alice", "g2") // the stream may queue again after a Drop
	if got := drain(q); !slices.Equal(got, []string{"g2"}) {
		t.Fatalf("after a new push: got %v, want [g2]", got)
	}
	var wg sync.WaitGroup
	var ok bool
	wg.Go(func() { _, ok = q.Next() })
	q.Stop()
	wg.Wait()
	if ok {
		t.Fatal("Next returned a job from an empty stopped queue")
	}
	q.Push(kept, "alice", "k1")
	if _, ok := q.TryNext(); ok {
		t.Fatal("TryNext returned a job after Stop")
	}
}
