package policy

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/policy/cacheplan"
	"github.com/sophon-dl/sophon/profiler"
)

// smallsAndBig: ten small photos (200 B) that no split shrinks (decode
// makes them 800 B, the crop 300 B) and one big photo (3000 B) whose crop
// is ten times smaller (300 B). Link 100 B/s; the CPUs are nearly free.
func smallsAndBig() (*profiler.Profile, Resources) {
	p := &profiler.Profile{Ops: []string{"decode", "random_resized_crop"}}
	for i := range 10 {
		p.Samples = append(p.Samples, profiler.SampleProfile{ID: uint64(i), Raw: 200, Bytes: []int64{200, 800, 300}, OpNS: []int64{1e6, 1e6}})
	}
	p.Samples = append(p.Samples, profiler.SampleProfile{ID: 10, Raw: 3000, Bytes: []int64{3000, 12000, 300}, OpNS: []int64{1e7, 1e6}})
	return p, Resources{LinkBytesPerSec: 100, StorageCores: 1, ComputeCores: 1}
}

// TestCacheSmallBeforeBig: with room for the big photo or the ten small
// ones, the planner keeps the small ones (2000 B off the link) and fetches
// the big one as its crop (300 B), where caching the big one would save
// only its crop's 300 B; lru's random hits do worse.
func TestCacheSmallBeforeBig(t *testing.T) {
	p, r := smallsAndBig()
	r.CacheBytes = 3000
	for _, name := range []string{NameOptimal, NameSOPHON} {
		pl, err := byName1(name, p, r)
		if err != nil {
			t.Fatal(err)
		}
		want := append(slices.Repeat([]bool{true}, 10), false)
		if !slices.Equal(pl.Cached, want) {
			t.Fatalf("%s: Cached %v, want %v", name, pl.Cached, want)
		}
		if pl.Split[10] != 2 || pl.Split[0] != 0 {
			t.Errorf("%s: splits %v, want the big one at its crop (2), the cached at the cache split (0)", name, pl.Split)
		}
		if pl.Pred.Bytes != 300 || !near(pl.Pred.Seconds, 3) {
			t.Errorf("%s: predicted %v B, %v s; want 300 B, 3 s", name, pl.Pred.Bytes, pl.Pred.Seconds)
		}
		// The first epoch fetches the cached samples raw.
		if e0 := first1(p, r, pl); e0.Pred.Bytes != 2300 || !slices.Equal(e0.Cached, pl.Cached) || !near(e0.Pred.Seconds, 23) {
			t.Errorf("%s: epoch 0 sends %v B in %v s, want 2300 B, 23 s", name, e0.Pred.Bytes, e0.Pred.Seconds)
		}
	}
	// Re-planned with the residency fixed, the plan is the same.
	opt := one(Optimal, p, r)
	if again, err := resident1(NameOptimal, p, r, opt.Cached); err != nil || !reflect.DeepEqual(again, opt) {
		t.Errorf("Resident: %+v, %v; want %+v", again, err, opt)
	}
	if _, err := resident1(NameOptimal, p, r, opt.Cached[1:]); !errors.Is(err, ErrResidency) {
		t.Errorf("Resident, short residency: %v, want ErrResidency", err)
	}
	if _, err := resident1("greedy", p, r, opt.Cached); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("Resident, unknown policy: %v, want ErrUnknownPolicy", err)
	}
	if b := cacheBound1(p, r); b > 3+1e-9 || b < 2-1e-9 {
		t.Errorf("cache bound %v, want in [2, 3] (the relaxation caches a third of the big one)", b)
	}
	lru := one(LRU, p, r)
	entries := make([]float64, len(p.Samples))
	for i := range p.Samples {
		entries[i] = cacheplan.Entry(&p.Samples[i], CacheSplit(p))
	}
	h := cacheplan.LRUHitRatio(3000, entries, cacheplan.LRULag)
	if h <= 0 || h >= 3000.0/5000 || !near(lru.Pred.Bytes, 5000*(1-h)) || lru.Pred.Seconds <= 3 || lru.Cached != nil {
		t.Errorf("lru: %+v at hit ratio %v, want %v B (a hit ratio under the budget's 0.6 of the bytes) and slower than the plan", lru.Pred, h, 5000*(1-h))
	}
}

// TestCacheZeroBudget: a budget no entry fits in, or none, gives the plan
// without a cache, bit for bit.
func TestCacheZeroBudget(t *testing.T) {
	p, r := smallsAndBig()
	for _, f := range []func(Instance) (Plan, error){Optimal, SOPHON} {
		plain := one(f, p, r)
		r.CacheBytes = 199
		if got := one(f, p, r); !reflect.DeepEqual(got, plain) || got.Cached != nil {
			t.Errorf("%s: budget 199 changed the plan: %+v, want %+v", plain.Policy, got, plain)
		}
		r.CacheBytes = 0
	}
	if cacheBound1(p, r) != bound1(p, r) {
		t.Errorf("CacheBound without a cache %v, Bound %v", cacheBound1(p, r), bound1(p, r))
	}
}

// TestCacheDeterministic: a pipeline without random ops caches finished
// outputs (split n): a resident sample costs its read alone.
func TestCacheDeterministic(t *testing.T) {
	p := &profiler.Profile{Ops: []string{"decode", "resize", "center_crop", "to_tensor"}, Samples: []profiler.SampleProfile{
		{ID: 0, Raw: 1000, Bytes: []int64{1000, 9000, 4000, 3000, 12000}, OpNS: []int64{4e6, 2e6, 1e5, 1e6}},
		{ID: 1, Raw: 900, Bytes: []int64{900, 9000, 4000, 3000, 12000}, OpNS: []int64{4e6, 2e6, 1e5, 1e6}},
	}}
	if k := CacheSplit(p); k != 4 {
		t.Fatalf("CacheSplit %d, want 4", k)
	}
	r := Resources{LinkBytesPerSec: 1000, StorageCores: 1, ComputeCores: 1, CacheBytes: 12000}
	pl := one(Optimal, p, r)
	if pl.Cached == nil || pl.Cached[0] == pl.Cached[1] || pl.Split[slices.Index(pl.Cached, true)] != 4 {
		t.Fatalf("Cached %v, splits %v: want one finished output resident, at split 4", pl.Cached, pl.Split)
	}
	if want := 12000 * cacheplan.ReadNSPerByte * 1e-9; pl.Pred.ComputeCPUSeconds < want {
		t.Errorf("compute CPU %v s, want at least the read's %v s", pl.Pred.ComputeCPUSeconds, want)
	}
	// The first epoch makes the finished outputs from whatever arrives: it
	// is optimal's plan without a cache, not a fetch of finished outputs.
	r0 := r
	r0.CacheBytes = 0
	if f, plain := first1(p, r, pl), one(Optimal, p, r0); !near(f.Pred.Seconds, plain.Pred.Seconds) || !slices.Equal(f.Cached, pl.Cached) {
		t.Errorf("first epoch %v s, want optimal's without a cache, %v s", f.Pred.Seconds, plain.Pred.Seconds)
	}
}

// bruteCache is the best predicted steady-state epoch over every
// residency within r.CacheBytes and every split of the rest.
func bruteCache(p *profiler.Profile, r Resources) float64 {
	k, n := CacheSplit(p), len(p.Samples)
	budget := r.CacheBytes
	r.CacheBytes = 0
	best := bruteForce(p, r)
	cached := make([]bool, n)
	for set := 1; set < 1<<n; set++ {
		var used float64
		for i := range n {
			cached[i] = set&(1<<i) != 0
			if cached[i] {
				used += cacheplan.Entry(&p.Samples[i], k)
			}
		}
		if used <= budget {
			q := cacheplan.Rewrite(p, cached, k)
			if s := &q.Samples[0]; p.Samples[0].Compressed != nil && s.Compressed == nil {
				// bruteForce enumerates the codec where sample 0 has
				// one: give it an unreachable one.
				s.Compressed = slices.Repeat([]int64{cacheplan.Unreachable}, len(s.Bytes))
			}
			best = min(best, bruteForce(q, r))
		}
	}
	return best
}

// checkCache asserts what must hold with a cache: every plan's residency
// fits, its Pred is Predict's on its residency, the bound is below every
// plan, cache or not, and optimal with a cache is no worse than without.
func checkCache(t *testing.T, p *profiler.Profile, r Resources) (opt, bound float64) {
	t.Helper()
	k := CacheSplit(p)
	r0 := r
	r0.CacheBytes = 0
	bound = cacheBound1(p, r)
	slack := func(x float64) float64 { return x + 1e-9*max(x, 1e-300) }
	for _, pl := range append(all1(p, r), all1(p, r0)...) {
		if bound > slack(pl.Pred.Seconds) {
			t.Errorf("cache bound %v > %s %v (cached %v)", bound, pl.Policy, pl.Pred.Seconds, pl.Cached != nil)
		}
		if pl.Cached == nil {
			continue
		}
		var used float64
		split := slices.Clone(pl.Split)
		for i, c := range pl.Cached {
			if c {
				used += cacheplan.Entry(&p.Samples[i], k)
				if split[i] != k {
					t.Errorf("%s: cached sample %d at split %d, want %d", pl.Policy, i, split[i], k)
				}
				split[i] = 0
			}
		}
		if used > r.CacheBytes {
			t.Errorf("%s: %v B resident, budget %v", pl.Policy, used, r.CacheBytes)
		}
		if got := predict1(cacheplan.Rewrite(p, pl.Cached, k), r0, split, pl.Compress); !near(got.Seconds, pl.Pred.Seconds) {
			t.Errorf("%s: Pred %v, Predict on its residency %v", pl.Policy, pl.Pred.Seconds, got.Seconds)
		}
	}
	for _, pl := range all1(p, r) {
		// The first epoch fetches what it fills the cache with, and is no
		// worse than the steady plan's splits.
		f := first1(p, r, pl)
		if steady := predict1(p, r0, pl.Split, pl.Compress); f.Pred.Seconds > slack(steady.Seconds) {
			t.Errorf("%s: first epoch %v > the steady splits' %v", pl.Policy, f.Pred.Seconds, steady.Seconds)
		}
		if got := predict1(p, r0, f.Split, f.Compress); !near(got.Seconds, f.Pred.Seconds) {
			t.Errorf("%s: first epoch Pred %v, Predict %v", pl.Policy, f.Pred.Seconds, got.Seconds)
		}
		for i, c := range f.Cached {
			if c && k == 0 && f.Split[i] != 0 {
				t.Errorf("%s: first epoch fetches resident sample %d at %d, want %d", pl.Policy, i, f.Split[i], k)
			}
		}
	}
	opt = one(Optimal, p, r).Pred.Seconds
	if plain := one(Optimal, p, r0).Pred.Seconds; opt > slack(plain) {
		t.Errorf("optimal with a cache %v > without %v", opt, plain)
	}
	return opt, bound
}

func TestCachePropertiesTiny(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	worst, sum, count := 1.0, 0.0, 0
	for trial := range 80 {
		n, nops, comp := 1+rng.IntN(4), 1+rng.IntN(3), rng.IntN(2) == 0
		if comp && n >= 3 {
			nops = min(nops, 2) // keep the brute force small
		}
		p := randomProfile(rng, n, nops, comp)
		if nops >= 2 && rng.IntN(2) == 0 {
			addRandomCut(rng, p)
		}
		r := randomResources(rng, n)
		var total float64
		for i := range p.Samples {
			total += cacheplan.Entry(&p.Samples[i], CacheSplit(p))
		}
		r.CacheBytes = total * rng.Float64()
		opt, bound := checkCache(t, p, r)
		bf := bruteCache(p, r)
		if bound > bf*(1+1e-9) {
			t.Errorf("trial %d: cache bound %v > brute force %v", trial, bound, bf)
		}
		if opt < bf*(1-1e-9) {
			t.Errorf("trial %d: optimal %v beats brute force %v", trial, opt, bf)
		} else if bf > 0 {
			worst, sum, count = max(worst, opt/bf), sum+opt/bf, count+1
		}
	}
	t.Logf("optimal with the cache / best residency and splits: worst %.4f, mean %.4f", worst, sum/float64(count))
}

func TestCachePropertiesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	worst := 0.0
	for range 30 {
		n := 20 + rng.IntN(300)
		p := randomProfile(rng, n, 1+rng.IntN(5), rng.IntN(2) == 0)
		r := randomResources(rng, n)
		var total float64
		for i := range p.Samples {
			total += cacheplan.Entry(&p.Samples[i], CacheSplit(p))
		}
		r.CacheBytes = total * rng.Float64()
		if opt, bound := checkCache(t, p, r); bound > 0 {
			worst = max(worst, opt/bound)
		}
	}
	t.Logf("worst optimal/cache bound over random profiles: %.4f", worst)
}
