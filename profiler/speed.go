package profiler

import (
	"math"
	"slices"
)

// Heterogeneous CPUs. The paper assumes the storage node's CPU is as fast
// as the compute node's; here storage CPU cost is predicted from the
// compute node's profile scaled by a measured speed ratio. Both nodes run
// the same reference work: the storage agent reports the CPU time it spent
// on some samples' storage side at split k (storage_cpu_ns), and the
// compute node's profile holds the same samples' prefix cost
// (SampleProfile.PrefixNS(k)). The per-sample ratio compute/storage is the
// storage node's speed relative to the compute node's.

// SpeedRatio estimates the storage node's speed relative to the compute
// node's from the same work measured on both: computeNS[i] and storageNS[i]
// are one sample's CPU time on each (pairs beyond the shorter slice are
// ignored). It is the median of the per-sample ratios computeNS/storageNS,
// so a few outliers (a preempted thread, a cache-cold first call) do not
// move it; pairs with a zero or negative time are skipped. 0.5 means the
// storage node takes twice as long. It returns 0 when no pair is usable:
// no evidence, which StorageCost treats as equal speed.
func SpeedRatio(computeNS, storageNS []int64) float64 {
	n := min(len(computeNS), len(storageNS))
	ratios := make([]float64, 0, n)
	for i := range n {
		if computeNS[i] > 0 && storageNS[i] > 0 {
			ratios = append(ratios, float64(computeNS[i])/float64(storageNS[i]))
		}
	}
	if len(ratios) == 0 {
		return 0
	}
	slices.Sort(ratios)
	m := len(ratios) / 2
	if len(ratios)%2 == 1 {
		return ratios[m]
	}
	return (ratios[m-1] + ratios[m]) / 2
}

// StorageCost predicts the storage node's CPU time for work that costs
// prefixComputeNS on the compute node, given the storage node's relative
// speed (SpeedRatio): prefixComputeNS / speed, rounded, saturating at
// MaxInt64. A speed that is zero, negative, NaN or infinite is treated as
// 1 (the paper's homogeneous assumption).
func StorageCost(prefixComputeNS int64, speed float64) int64 {
	if !(speed > 0) || math.IsInf(speed, 0) {
		speed = 1
	}
	c := math.Round(float64(prefixComputeNS) / speed)
	if c >= math.MaxInt64 {
		return math.MaxInt64
	}
	if c <= math.MinInt64 {
		return math.MinInt64
	}
	return int64(c)
}
