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

// TestShedderPrime: primed, a storage-bound plan sheds its least efficient
// offloads from the first request, as many as the plan's own costs call
// for; a balanced plan sheds none; and the measured speed takes over.
func TestShedderPrime(t *testing.T) {
	// 100 offloads of 1 ms on one core (100 ms) against 100 x 200 B at
	// 100 kB/s (200 ms of link): balanced enough, nothing primed.
	s, _ := testShedder(100, 100e3, 1)
	s.Prime()
	if c := s.cut.Load(); c != 0 {
		t.Fatalf("a link-bound plan primed cut %d", c)
	}
	// At 800 kB/s the link takes 25 ms: storage 4x it. Each position
	// shed moves 1 ms of storage and adds 800 B (1 ms of link): x shed
	// leave 100 - x ms against 25 + x, within ShedSlack from x = 36.
	s, now := testShedder(100, 800e3, 1)
	s.Prime()
	shed := 0
	for pos := range 100 {
		if s.Split(pos, 1) == 0 {
			shed++
			if pos >= 36 {
				t.Fatalf("position %d primed raw: not among the least efficient", pos)
			}
		}
	}
	if shed != 36 {
		t.Fatalf("primed %d raw, want 36", shed)
	}
	// Served at four times the planned speed, the storage side keeps
	// up: once shedMin offloads are back the cut is lifted.
	serve(s, now, 36, 36+shedMin, 0.25)
	if c := s.cut.Load(); c != 0 {
		t.Fatalf("cut %d after offloads served at 4x the planned speed", c)
	}
}

func TestShedderShedsTheLeastEfficient(t *testing.T) {
	const n = 1000
	s, now := testShedder(n, 200e3, 1)
	// Priorities spread over the positions (a permutation of 1..n), as
	// an epoch's shuffled order spreads them.
	least, most := -1, -1
	s.byPrio = s.byPrio[:0]
	for pos := range n {
		s.prio[pos] = uint32((pos+500)*7919%n + 1)
		switch s.prio[pos] {
		case 1:
			least = pos
		case n:
			most = pos
		}
	}
	for p := uint32(1); p <= n; p++ {
		for pos := range n {
			if s.prio[pos] == p {
				s.byPrio = append(s.byPrio, pos)
			}
		}
	}
	if least < shedMin || most < shedMin {
		t.Fatalf("test set-up: positions %d and %d are among the first %d", least, most, shedMin)
	}
	// The storage side runs at a quarter of the planned speed from the
	// start: once shedMin offloads are back, the least efficient of the
	// offloads still owed are requested raw.
	serve(s, now, 0, shedMin, 4)
	cut := s.cut.Load()
	if cut <= 1 {
		t.Fatalf("cut %d after %d offloads at a quarter of the planned speed: nothing would be shed", cut, shedMin)
	}
	if s.Split(least, 1) != 0 || s.Split(most, 1) != 1 {
		t.Fatalf("cut %d: position %d (least efficient) requested at %d, position %d (most) at %d; want 0 and 1", cut, least, s.Split(least, 1), most, s.Split(most, 1))
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
