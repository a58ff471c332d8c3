package schedule

import (
	"testing"
	"time"
)

// testShedder is a shedder over n offloaded positions of raw bytes 1000
// and planned bytes 200, position i of priority i+1 and planned storage
// cost 1 ms, with a link of rate bytes/s and cores storage cores.
func testShedder(n int, rate, cores float64) (*Shedder, *time.Time) {
	now := time.Unix(0, 0)
	s := &Shedder{
		cores: cores, rate: rate, now: func() time.Time { return now },
		prio: make([]uint32, n), cost: make([]float64, n), raw: make([]float64, n), wire: make([]float64, n),
		state: make([]uint8, n),
	}
	for pos := range n {
		s.prio[pos], s.cost[pos], s.raw[pos], s.wire[pos] = uint32(pos+1), 1e6, 1000, 200
		s.byPrio = append(s.byPrio, pos)
	}
	return s, &now
}

// serve requests and receives the positions [from, to) at their split,
// each having held its storage agent's budget for held times its planned
// cost, advancing the clock by shedEvery between responses.
func serve(s *Shedder, now *time.Time, from, to int, held float64) {
	for pos := from; pos < to; pos++ {
		k := s.Split(pos, 1)
		s.Requested(pos, k, 1)
		*now = now.Add(shedEvery)
		s.Received(pos, k == 1, held*s.cost[pos])
	}
}

func TestShedderKeepsABalancedPlan(t *testing.T) {
	// 100 offloads of 1 ms on one core: 100 ms of storage; 100 x 200 B
	// at 200 kB/s: 100 ms of link. Balanced; served at the planned speed,
	// nothing is shed.
	s, now := testShedder(100, 200e3, 1)
	serve(s, now, 0, 100, 1)
	if got := s.Count(); got != 0 {
		t.Fatalf("shed %d offloads of a plan served at its speed", got)
	}
}

func TestShedderShedsTheLeastEfficient(t *testing.T) {
	const n = 1000
	s, now := testShedder(n, 200e3, 1)
	// The storage side runs at a quarter of the planned speed from the
	// start: once shedMin offloads are back, the least efficient of the
	// offloads still owed are requested raw.
	serve(s, now, 0, shedMin, 4)
	cut := s.cut.Load()
	if cut <= 1 {
		t.Fatalf("cut %d after 20 offloads at a quarter of the planned speed: nothing would be shed", cut)
	}
	if s.Split(0, 1) != 0 || s.Split(n-1, 1) != 1 {
		t.Fatalf("cut %d: position 0 (least efficient) requested at %d, position n-1 (most) at %d; want 0 and 1", cut, s.Split(0, 1), s.Split(n-1, 1))
	}
	// The balance: the storage time of what stays offloaded (at a
	// quarter speed) is about the link time of everything owed.
	var storage, bytes float64
	for pos := shedMin; pos < n; pos++ {
		if s.Split(pos, 1) == 1 {
			storage += 4 * s.cost[pos]
			bytes += s.wire[pos]
		} else {
			bytes += s.raw[pos]
		}
	}
	link := bytes / s.rate * 1e9
	if storage > link*(1+ShedSlack)+4e6 || storage < link*0.8 {
		t.Fatalf("after shedding: storage %.0f ms, link %.0f ms: not balanced", storage/1e6, link/1e6)
	}
	// Back to the planned speed: once the window of recent offloads holds
	// only fast ones, the positions still owed are offloaded again.
	pos := shedMin
	for ; s.n < shedMin+shedWindow && pos < n; pos++ {
		serve(s, now, pos, pos+1, 1)
	}
	if pos >= n {
		t.Fatalf("only %d offloads in the whole epoch after the slowdown", s.n-shedMin)
	}
	for owed := pos; owed < n; owed++ {
		if s.Split(owed, 1) != 1 {
			t.Fatalf("cut %d after the storage side recovered (position %d): owed position %d still shed", s.cut.Load(), pos, owed)
		}
	}
}

func TestShedderNilIsPlanned(t *testing.T) {
	var s *Shedder
	if s.Split(3, 2) != 2 || s.Count() != 0 {
		t.Fatal("a nil shedder changed a split")
	}
	s.Requested(3, 2, 2)
	s.Received(3, true, 1)
}
