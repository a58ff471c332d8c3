package policy

import "github.com/sophon-dl/sophon/profiler"

// All returns every policy's plan, in the order nooff, alloff, resizeoff
// (when CropSplit finds a crop op), fastflow, sophon, optimal, and lru
// with r.CacheBytes.
func All(p *profiler.Profile, r Resources) []Plan {
	plans := []Plan{NoOff(p, r), AllOff(p, r)}
	if k := CropSplit(p); k >= 0 {
		plans = append(plans, ResizeOff(p, r, k))
	}
	plans = append(plans, FastFlow(p, r), SOPHON(p, r), Optimal(p, r))
	if r.CacheBytes > 0 {
		plans = append(plans, LRU(p, r))
	}
	return plans
}

// Histogram counts a plan's samples per split: index 0 is SplitCut, index
// k+1 split k, for k in [0, n]; splits outside those count nowhere.
func (pl *Plan) Histogram(n int) []int {
	h := make([]int, n+2)
	for _, k := range pl.Split {
		if k >= SplitCut && k <= n {
			h[k+1]++
		}
	}
	return h
}
