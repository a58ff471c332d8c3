package cache

import (
	"crypto/sha256"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// residency keeps the samples of its set resident.
type residency map[uint64]bool

func (r residency) Cached(s uint64) bool { return r[s] }
func (r residency) Caches() bool         { return len(r) > 0 }

// wanted is which of n positions u wants.
func wanted(u *Use, n int) []bool {
	w := make([]bool, n)
	for pos := range w {
		w[pos] = u.Want(pos)
	}
	return w
}

// TestUseWants: a planned store wants the plan's resident samples, and
// nothing (no use) under a plan without residency, except in a warm
// epoch, which wants every raw fetch until a plan with residency fills
// it; an LRU store wants every raw fetch, warm or not.
func TestUseWants(t *testing.T) {
	order := []uint64{10, 11, 12, 13}
	raw := func(pos int) bool { return pos%2 == 0 }
	planned := open(t, filepath.Join(t.TempDir(), "p"), 1<<20, PolicyPlanned)
	lru := open(t, filepath.Join(t.TempDir(), "l"), 1<<20, PolicyLRU)
	if u := planned.Use(fp, "p@1", 3, residency{}, false, order, raw); u != nil || u.Want(0) || u.Report() != nil {
		t.Errorf("planned store, nothing resident: a use %v", u)
	}
	u := planned.Use(fp, "p@1", 3, residency{11: true, 13: true}, false, order, raw)
	if got := wanted(u, 4); !slices.Equal(got, []bool{false, true, false, true}) || u.Wanted() != 2 || u.Split() != 3 || u.Warm() {
		t.Errorf("planned: wants %v (%d) at split %d, warm %v; want the resident 11 and 13 at 3", got, u.Wanted(), u.Split(), u.Warm())
	}
	w := planned.Use(fp, "p@1", 3, residency{}, true, order, raw)
	if got := wanted(w, 4); !slices.Equal(got, []bool{true, false, true, false}) || !w.Warm() || !w.Fills(residency{11: true}) || w.Fills(residency{}) {
		t.Errorf("warm: wants %v, warm %v; want the raw fetches, filled by a plan with residency", got, w.Warm())
	}
	w.Add(1)
	if !w.Want(1) || w.Wanted() != 3 {
		t.Errorf("after Add(1): wants %v, %d", wanted(w, 4), w.Wanted())
	}
	for _, warm := range []bool{false, true} {
		l := lru.Use(fp, "p@1", 3, residency{11: true}, warm, order, raw)
		if got := wanted(l, 4); !slices.Equal(got, []bool{true, false, true, false}) || l.Split() != 0 || l.Warm() {
			t.Errorf("lru, warm %v: wants %v at split %d; want the raw fetches at 0", warm, got, l.Split())
		}
	}
}

// TestUseCounts: a wanted position fetched and finished raw is a miss and
// a fill, then a hit; a bad entry is a refill; the report counts them.
func TestUseCounts(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "c"), 1<<20, PolicyLRU)
	lim := wireform.Limits{MaxPayload: 1 << 20}
	good, bad := ops.Encoded(payload(1, 500)), ops.Encoded(payload(2, 500))
	hashes := map[uint64][32]byte{1: sha256.Sum256(good), 2: {1}}
	hash := func(s uint64) ([32]byte, bool) { h, ok := hashes[s]; return h, ok }
	u := s.Use(fp, "p@1", 0, residency{}, false, []uint64{1, 2, 3}, func(pos int) bool { return pos < 2 })
	u.Fetched(0, 1, 0, good, nil, true)
	u.Fetched(1, 2, 0, bad, nil, true)
	u.Fetched(2, 3, 0, good, nil, true) // not wanted
	s.Drain()
	if !u.Hit(0, 1, false) || u.Hit(2, 3, false) {
		t.Fatalf("hits: sample 1 %v, unwanted 3 %v; want 1 only", u.Hit(0, 1, false), u.Hit(2, 3, false))
	}
	if _, err := u.Get(1, lim, hash); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Get(2, lim, hash); err == nil {
		t.Fatal("an entry that does not match the catalog was served")
	}
	r := u.Report()
	if r.Policy != PolicyLRU || r.Wanted != 2 || r.Misses != 2 || r.Fills != 2 || r.Hits != 1 || r.Refills != 1 || r.ReadBytes <= 0 {
		t.Errorf("report %+v; want 2 wanted, 2 misses and fills, 1 hit, 1 refill", r)
	}
}
