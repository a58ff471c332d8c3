package cache

import (
	"errors"
	"sync/atomic"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// Use is one epoch's use of the store: which of its positions the cache
// is to hold (Want: the plan's resident samples, fetched at split 0
// however the plan splits them, or under the LRU policy every raw fetch),
// the hits it serves (Get), the misses and refills it is filled with
// (Fetched, Put), and their counts for the epoch's report (Report). A
// wanted position is served locally when the index has its entry (Hit);
// otherwise it is fetched raw like any sample and, once it finished, put:
// the raw file (split 0, checked against the catalog's content hash on
// its way in) or the finished output computed from it. An entry that is
// bad when read is dropped and its sample fetched again raw (a refill),
// never served. A nil *Use is an epoch without the cache: it wants
// nothing. The epoch sets Want up before it runs (Store.Use, Add);
// the other methods are safe for concurrent use.
type Use struct {
	s    *Store
	view *View
	want []bool // by position
	// warm: the epoch keeps every raw fetch until a plan with a cache
	// takes over (Store.Use, Fills).
	warm bool
	// The epoch's counts (report.CacheStats).
	wanted                                          int
	hits, misses, fills, refills, forged, readBytes atomic.Int64
}

// Residency is what the cache needs of an epoch's plan: whether it keeps
// a sample resident (Cached), and any (Caches).
type Residency interface {
	Cached(sample uint64) bool
	Caches() bool
}

// Use sets up an epoch's use of s over order (position -> sample) under
// plan, for the dataset fingerprint fp and the pipeline pipe whose cache
// split is split (ops.Pipeline.CacheSplit); raw reports whether a
// position is fetched raw (split 0, no codec) as the epoch stands. It is
// nil when the epoch uses no cache: a planned store with a plan that
// keeps nothing resident, outside a warm epoch. Under LRU every raw
// fetch is wanted, at split 0; under the planned policy the plan's
// resident samples, which the epoch fetches at split 0.
//
// A warm epoch (a policy run's epochs before its first plan) with a plan
// without residency fills a planned store with what it fetches raw
// anyway, evicting nothing, so that the first plan finds its resident
// samples there (all of them when the budget holds the dataset); the
// plan's Puts later evict what it does not keep.
func (s *Store) Use(fp, pipe string, split int, plan Residency, warm bool, order []uint64, raw func(pos int) bool) *Use {
	keep := plan.Cached
	if s.LRU() {
		split, warm = 0, false
	} else {
		warm = warm && !plan.Caches()
		if !plan.Caches() && !warm {
			return nil
		}
		if warm {
			keep = func(uint64) bool { return true }
		}
	}
	u := &Use{s: s, view: s.View(fp, pipe, split, keep), warm: warm, want: make([]bool, len(order))}
	for pos, sample := range order {
		if s.LRU() || warm {
			u.want[pos] = raw(pos)
		} else {
			u.want[pos] = plan.Cached(sample)
		}
		if u.want[pos] {
			u.wanted++
		}
	}
	return u
}

// Want reports whether the cache is to hold position pos: served from it
// or, fetched raw, filled.
func (u *Use) Want(pos int) bool { return u != nil && u.want[pos] }

// Wanted is how many positions the cache is to hold.
func (u *Use) Wanted() int {
	if u == nil {
		return 0
	}
	return u.wanted
}

// Warm reports whether the epoch keeps every raw fetch until a plan with
// a cache takes over.
func (u *Use) Warm() bool { return u != nil && u.warm }

// Fills reports whether a plan swapped into the epoch fills the cache
// with its resident samples (Add): a warm epoch (Store.Use kept every raw
// fetch) and a plan that keeps samples resident.
func (u *Use) Fills(plan Residency) bool { return u.Warm() && plan.Caches() }

// Add wants position pos too: a warm epoch's position that a plan
// swapped in keeps resident (Fills), fetched raw into the cache. Call it
// under the epoch's schedule lock.
func (u *Use) Add(pos int) {
	u.want[pos] = true
	u.wanted++
}

// SetKeep makes keep the residency of the cache's Puts from now on (a
// plan swapped into a warm epoch: its Puts may evict the rest).
func (u *Use) SetKeep(keep func(sample uint64) bool) { u.view.SetKeep(keep) }

// Split is the split the cache keeps its entries at.
func (u *Use) Split() int { return u.view.Split() }

// Hit reports whether position pos, sample, is served from the cache. A
// profiling epoch (stage 2 records every sample from its raw bytes)
// takes no hit of finished outputs.
func (u *Use) Hit(pos int, sample uint64, profiling bool) bool {
	return u.Want(pos) && (!profiling || u.view.Split() == 0) && u.view.Has(sample)
}

// Get reads sample's entry and decodes it (View.GetValue), counting a
// hit; a bad entry (ErrEntry; ErrForged among them) is dropped and
// counted a refill, a cache that went away under it a miss.
func (u *Use) Get(sample uint64, lim wireform.Limits, hash func(sample uint64) ([32]byte, bool)) (ops.Value, error) {
	in, n, err := u.view.GetValue(sample, lim, hash)
	switch {
	case errors.Is(err, ErrEntry):
		u.refills.Add(1)
		if errors.Is(err, ErrForged) {
			u.forged.Add(1)
		}
	case err != nil:
		u.misses.Add(1)
		u.view.Miss()
	default:
		u.hits.Add(1)
		u.readBytes.Add(n)
	}
	return in, err
}

// Fetched counts wanted position pos a miss, fetched over the link, and
// puts its sample when it finished (ok) from its raw bytes (at split k
// 0): in as it arrived, out the pipeline's output. Positions the cache
// does not want are left alone.
func (u *Use) Fetched(pos int, sample uint64, k int, in, out ops.Value, ok bool) {
	if !u.Want(pos) {
		return
	}
	u.misses.Add(1)
	u.view.Miss()
	if ok && k == 0 {
		u.Put(sample, in, out)
	}
}

// Put puts sample, finished from its raw bytes in (checked against the
// catalog) with output out, in the cache (View.PutValue).
func (u *Use) Put(sample uint64, in, out ops.Value) {
	if u.view.PutValue(sample, in, out) {
		u.fills.Add(1)
	}
}

// Report is the epoch's report.CacheStats, once the store wrote its
// fills; nil without the cache.
func (u *Use) Report() *report.CacheStats {
	if u == nil {
		return nil
	}
	u.s.Drain() // the epoch's fills are resident, or failed
	st := u.s.Stats()
	pol := PolicyPlanned
	if u.view.LRU() {
		pol = PolicyLRU
	}
	return &report.CacheStats{Policy: pol, Split: u.view.Split(), Wanted: u.wanted, Hits: int(u.hits.Load()), Misses: int(u.misses.Load()),
		Fills: int(u.fills.Load()), Refills: int(u.refills.Load() + u.s.TakeOpenDrops()), Forged: int(u.forged.Load()), ReadBytes: u.readBytes.Load(),
		ResidentSamples: st.Samples, ResidentBytes: st.Bytes, BudgetBytes: u.s.Budget(), Degraded: st.Degraded}
}
