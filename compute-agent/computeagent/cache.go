package computeagent

import (
	"sync"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/policy"
)

// openCache opens the node's cache (Config.CacheDir) the first time an
// epoch needs it and gives it to the epoch engine; nil without one. A
// cache that cannot be used (directory, key file, index) is open but off
// (cache.Stats.Degraded, the epoch report's cache.degraded), after one
// warning: the epoch runs without it.
func (a *Agent) openCache() (*cache.Store, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache != nil || a.cfg.CacheDir == "" {
		return a.cache, nil
	}
	if a.closed {
		return nil, ErrClosed
	}
	build := a.cfg.CacheBuild
	if build == "" {
		build = cacheBuild()
	}
	s, err := cache.Open(cache.Options{Dir: a.cfg.CacheDir, Bytes: int64(a.cfg.CacheBytes), Policy: a.cfg.CachePolicy,
		MaxPayload: int64(a.cfg.MaxPayload), KeyFile: a.cfg.CacheKeyFile, Build: build, Log: a.log})
	if err != nil {
		return nil, configErr("%v", err)
	}
	st := s.Stats()
	a.log.Info().Str("dir", s.Dir()).Int64("budget_bytes", s.Budget()).Bool("lru", s.LRU()).
		Int("resident_samples", st.Samples).Int64("resident_bytes", st.Bytes).Bool("degraded", st.Degraded).Str("build", build).Msg("cache open")
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

// cacheBuild names the build of the op library and codec running here,
// which keys the cache's finished outputs (cache.Options.Build), so that
// an upgrade that changes numerics never serves old tensors: the JPEG
// backend, the executable's build and the JPEG libraries mapped into the
// process (cache.Build). Computed once.
var cacheBuild = sync.OnceValue(func() string { return cache.Build(jpeg.Backend, "jpeg") })
