package catalog

import (
	"math/bits"

	"github.com/sophon-dl/sophon/compute-agent/schedule"
)

// Place is an epoch's placement of its positions (order: position ->
// sample) over its storage agents: who holds each position's sample
// (holds, by agent: nil holds every sample; see Holdings.HoldsFunc), and
// which of them it is bound to: with roundRobin strictly, in turn;
// otherwise by preference, to the agent the plan chose (replica, by the
// agents' names; nil: none). unowned lists the positions no agent holds.
// The caller keeps to schedule.MaxFetchers agents.
func Place(order []uint64, holds []func(sample uint64) bool, roundRobin bool, names []string, replica func(sample uint64) (string, bool)) (pl schedule.Placement, unowned []int) {
	sharded := false
	for _, h := range holds {
		sharded = sharded || h != nil
	}
	n := len(order)
	all := schedule.AllFetchers(len(holds))
	if sharded {
		pl.Owners = make([]uint64, n)
		for pos, s := range order {
			for i, h := range holds {
				if h == nil || h(s) {
					pl.Owners[pos] |= 1 << i
				}
			}
			if pl.Owners[pos] == 0 {
				unowned = append(unowned, pos)
			}
		}
	}
	switch {
	case len(holds) < 2:
	case roundRobin:
		pl.Bound = make([]uint64, n)
		for pos := range n {
			o := all
			if pl.Owners != nil {
				o = pl.Owners[pos]
			}
			if k := bits.OnesCount64(o); k > 0 {
				pl.Bound[pos] = nthBit(o, pos%k)
			}
		}
	default:
		pl.Bound, pl.Prefer = planned(order, names, replica), true
	}
	return pl, unowned
}

// planned binds each position to the agent the plan chose for its sample
// (replica), where that agent is among names; nil when the plan chose
// none.
func planned(order []uint64, names []string, replica func(uint64) (string, bool)) []uint64 {
	if replica == nil {
		return nil
	}
	idx := make(map[string]int, len(names))
	for i, name := range names {
		idx[name] = i
	}
	var bound []uint64
	for pos, s := range order {
		name, ok := replica(s)
		if !ok {
			continue
		}
		if i, ok := idx[name]; ok {
			if bound == nil {
				bound = make([]uint64, len(order))
			}
			bound[pos] = 1 << i
		}
	}
	return bound
}

// nthBit is the n-th lowest set bit of m (n < popcount(m)).
func nthBit(m uint64, n int) uint64 {
	for range n {
		m &= m - 1
	}
	return m & -m
}
