package cacheplan

import (
	"container/list"
	"math/rand/v2"
)

// LRU in random order.
//
// Each epoch reads every sample once, in a fresh random order. An LRU
// cache of a fraction f of the bytes then hits on less than f of them
// (CoorDL, Mohan et al., VLDB 2021). It starts the epoch with the last
// samples the previous one read, and each miss evicts the least
// recently used of them, so many are gone before their turn comes and
// the hit ratio is well under the budget's share (docs/policy.md, "The
// LRU baseline", has figures). There is no closed form for entries of
// different sizes, so LRUHitRatio simulates the cache.

// LRULag is how many reads after its look-up a miss is put in an LRU
// cache: the compute agent looks a sample up when it takes the sample's
// position into its window and puts it once fetched and finished, about a
// window (--window, 64 requests by default) later, and at the latest
// when the epoch ends. On a small dataset that lag keeps the previous
// epoch's entries longer and lifts the hit ratio (docs/policy.md, "The
// LRU baseline"); on a large one it changes nothing.
const LRULag = 64

// lruSampleMax bounds the entries LRUHitRatio simulates: a larger
// dataset is simulated on a fixed random subset of this many, under the
// budget scaled by the subset's share of the bytes.
const lruSampleMax = 20000

// lruEpochs is how many epochs LRUHitRatio measures, after one that
// fills the cache.
const lruEpochs = 4

// LRUHitRatio is the steady-state fraction of the bytes read that hit an
// LRU cache of budget bytes (at most budget over the entries' total: a hit
// was cached when its epoch began), over samples whose entries take
// entries[i] bytes, each read once per epoch in a fresh random order. A
// miss is put in the cache lag reads later or when its epoch ends,
// evicting the least recently used entries until it fits (one larger than
// the budget is not kept). It simulates lruEpochs epochs after a filling
// one, with a fixed seed: the same inputs give the same ratio.
func LRUHitRatio(budget float64, entries []float64, lag int) float64 {
	var total float64
	for _, e := range entries {
		total += e
	}
	if total <= 0 || budget <= 0 || len(entries) == 0 {
		return 0
	}
	if budget >= total {
		return 1
	}
	rng := rand.New(rand.NewPCG(0x5eed, uint64(len(entries))))
	sizes := entries
	if len(entries) > lruSampleMax {
		sizes = make([]float64, lruSampleMax)
		var sub float64
		for i, j := range rng.Perm(len(entries))[:lruSampleMax] {
			sizes[i] = entries[j]
			sub += entries[j]
		}
		budget *= sub / total
		lag = lag * lruSampleMax / len(entries)
	}
	c := lruCache{budget: budget, sizes: sizes, at: make([]*list.Element, len(sizes))}
	var hits, reads float64
	var pending []int // misses not yet put, oldest first
	for e := 0; e <= lruEpochs; e++ {
		for _, i := range rng.Perm(len(sizes)) {
			hit := c.touch(i)
			if !hit {
				pending = append(pending, i)
			}
			for len(pending) > lag {
				c.put(pending[0])
				pending = pending[1:]
			}
			if e > 0 {
				reads += sizes[i]
				if hit {
					hits += sizes[i]
				}
			}
		}
		// An epoch ends when all its samples are finished: its misses
		// are in before the next epoch looks any up.
		for _, i := range pending {
			c.put(i)
		}
		pending = pending[:0]
	}
	return hits / reads
}

// lruCache is the simulated cache: entries by recency, front the most
// recent.
type lruCache struct {
	budget, used float64
	sizes        []float64 // entry bytes by sample
	order        list.List
	at           []*list.Element // by sample; nil when not cached
}

// touch looks sample i up, making it the most recent when cached, and
// reports whether it was.
func (c *lruCache) touch(i int) bool {
	if el := c.at[i]; el != nil {
		c.order.MoveToFront(el)
		return true
	}
	return false
}

// put caches sample i, unless it is cached or larger than the budget.
func (c *lruCache) put(i int) {
	size := c.sizes[i]
	if c.at[i] != nil || size > c.budget {
		return
	}
	for c.used+size > c.budget {
		old := c.order.Back()
		j := old.Value.(int)
		c.order.Remove(old)
		c.at[j] = nil
		c.used -= c.sizes[j]
	}
	c.at[i] = c.order.PushFront(i)
	c.used += size
}
