package computeagent

import (
	"sync"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/policy"
)

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
