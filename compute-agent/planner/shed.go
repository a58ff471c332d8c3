package planner

import (
	"cmp"
	"slices"

	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/policy"
)

// The epoch a plan runs is not always the plan: with work-conserving
// offload on (the compute agent's default), the engine's Shedder
// (schedule.Shedder) requests the least efficient offloads raw while the
// storage side would finish past the link. A storage-bound plan (the
// static ones under a small storage quota) then runs faster than its own
// prediction, and the report's prediction has to be of what runs: Shed.

// Shed is the prediction of plan, a plan of in indexed as run (its
// per-entry priorities, RunPlan.HintAt), once the Shedder's rule has run
// in the model, with the storage agents as fast as the plan assumes (the
// Shedder's primed cut, which it keeps while their measured speed is
// within schedule.ShedTrigger of that): when the plan's storage time is
// more than the link time x (1+schedule.ShedSlack), the offloads go raw
// (split 0, uncompressed) from the lowest priority up, a priority's
// offloads together (the Shedder's cut), until the storage time is no
// more than the link time x (1+schedule.ShedSlack), or none is left,
// short of a last group that would leave the larger of the storage and
// link times larger. A raw sample's ops move to the compute side and its
// raw bytes to the link; policy.Predict prices every step. It returns
// plan.Pred and 0 when nothing is shed, else the shed plan's prediction
// and how many offloads it moved raw.
//
// The shed count is found by bisection over the priority groups: the
// storage time falls and the link time grows with every group moved (a
// positive priority saves bytes; an offload's ops cost more storage CPU
// than sending its saved bytes would), so the first count that meets the
// slack is the Shedder's.
func Shed(in policy.Instance, plan *policy.Plan, run *RunPlan) (policy.Prediction, int, error) {
	pr := plan.Pred
	// No link rate or no storage cores: the Shedder has nothing to
	// balance (schedule.NewShedder returns none).
	if pr.LinkSeconds <= 0 || pr.StorageSeconds <= pr.LinkSeconds*(1+schedule.ShedSlack) || !run.Hinted() {
		return pr, 0, nil
	}
	// The offloads with a hint, least efficient first, and where each
	// priority's group ends.
	var byPrio []int
	for i := range plan.Split {
		if _, ns := run.HintAt(i); ns > 0 {
			byPrio = append(byPrio, i)
		}
	}
	slices.SortStableFunc(byPrio, func(a, b int) int { return cmp.Compare(run.prio[a], run.prio[b]) })
	var ends []int
	for j, i := range byPrio {
		if j+1 == len(byPrio) || run.prio[byPrio[j+1]] != run.prio[i] {
			ends = append(ends, j+1)
		}
	}
	predict := func(groups int) (policy.Prediction, error) {
		split, zstd := slices.Clone(plan.Split), slices.Clone(plan.Compress)
		for _, i := range byPrio[:ends[groups-1]] {
			split[i] = 0
			if zstd != nil {
				zstd[i] = false
			}
		}
		cp, err := policy.Predict(in, plan.Replica, split, zstd)
		return cp.Totals(), err
	}
	if len(ends) == 0 {
		return pr, 0, nil
	}
	// The fewest groups that meet the slack, or all of them.
	lo, hi := 1, len(ends)
	best, err := predict(hi)
	if err != nil {
		return policy.Prediction{}, 0, err
	}
	for lo < hi {
		mid := (lo + hi) / 2
		p, err := predict(mid)
		if err != nil {
			return policy.Prediction{}, 0, err
		}
		if p.StorageSeconds <= p.LinkSeconds*(1+schedule.ShedSlack) {
			hi, best = mid, p
		} else {
			lo = mid + 1
		}
	}
	// The group that crosses over may put more on the link than it takes
	// off the storage side (the Shedder keeps it then): every group
	// before it leaves the storage side the larger, so only it can.
	prev, shed := pr, 0
	if hi > 1 {
		if prev, err = predict(hi - 1); err != nil {
			return policy.Prediction{}, 0, err
		}
		shed = ends[hi-2]
	}
	if max(best.StorageSeconds, best.LinkSeconds) >= max(prev.StorageSeconds, prev.LinkSeconds) {
		return prev, shed, nil
	}
	return best, ends[hi-1], nil
}
