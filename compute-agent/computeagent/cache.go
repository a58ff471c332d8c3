package computeagent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/policy"
)

// openCache opens the node's cache (Config.CacheDir) the first time an
// epoch needs it and gives it to the epoch engine; nil without one.
func (a *Agent) openCache() (*cache.Store, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache != nil || a.cfg.CacheDir == "" {
		return a.cache, nil
	}
	if a.closed {
		return nil, ErrClosed
	}
	s, err := cache.Open(cache.Options{Dir: a.cfg.CacheDir, Bytes: int64(a.cfg.CacheBytes), Policy: a.cfg.CachePolicy,
		MaxPayload: int64(a.cfg.MaxPayload), Log: a.log})
	if err != nil {
		return nil, configErr("%v", err)
	}
	st := s.Stats()
	a.log.Info().Str("dir", s.Dir()).Int64("budget_bytes", s.Budget()).Bool("lru", s.LRU()).
		Int("resident_samples", st.Samples).Int64("resident_bytes", st.Bytes).Msg("cache open")
	a.cache = s
	a.engine.Cache = s
	a.cachePtr.Store(s)
	return s, nil
}

// plannedCacheBytes is the budget the planner plans under: the cache's
// with the planned policy (residency), or with the LRU cache under the lru
// policy (whose prediction counts the hits an LRU of that budget gets,
// policy.LRU), else 0.
func (a *Agent) plannedCacheBytes() float64 {
	if a.cfg.CacheDir == "" || a.cfg.CachePolicy == cache.PolicyLRU && a.cfg.Policy != policy.NameLRU {
		return 0
	}
	return float64(a.cfg.CacheBytes)
}

// cacheCollectors are the cache's Prometheus series, read from the store
// get returns (nil: zeros).
func cacheCollectors(get func() *cache.Store) []prometheus.Collector {
	stat := func(f func(cache.Stats) float64) func() float64 {
		return func() float64 {
			if s := get(); s != nil {
				return f(s.Stats())
			}
			return 0
		}
	}
	counter := func(name, help string, f func(cache.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, stat(f))
	}
	return []prometheus.Collector{
		counter("sophon_cache_hits_total", "Samples served from the node's cache (no link, no storage CPU).", func(s cache.Stats) float64 { return float64(s.Hits) }),
		counter("sophon_cache_misses_total", "Samples the cache was to hold that were absent: fetched raw and filled.", func(s cache.Stats) float64 { return float64(s.Misses) }),
		counter("sophon_cache_refills_total", "Cache entries found bad when read (corrupt, truncated, swapped, foreign, stale): dropped, never served, fetched again.",
			func(s cache.Stats) float64 { return float64(s.Refills) }),
		counter("sophon_cache_read_bytes_total", "Cache entry bytes read for the hits.", func(s cache.Stats) float64 { return float64(s.ReadBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sophon_cache_bytes", Help: "Bytes resident in the node's cache."}, stat(func(s cache.Stats) float64 { return float64(s.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sophon_cache_samples", Help: "Samples resident in the node's cache."}, stat(func(s cache.Stats) float64 { return float64(s.Samples) })),
	}
}
