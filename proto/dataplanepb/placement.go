package dataplanepb

import (
	"fmt"

	"github.com/sophon-dl/sophon/internal/placement"
)

// ShardRanges is l on the wire (InfoResponse.layout).
func ShardRanges(l placement.Layout) []*ShardRange {
	out := make([]*ShardRange, l.Len())
	for i := range out {
		r := l.Shard(i)
		out[i] = &ShardRange{First: r.First, Count: r.Count, Name: r.Name}
	}
	return out
}

// DecodePlacement checks and decodes what a storage agent's Info announces
// about placement: the layout of its samples (placement.LayoutFromRanges
// over info.layout and info.samples) and the shards it holds
// (placement.CheckHeld), as ints. Its errors wrap placement's sentinels;
// placement.ErrNoShards means an agent that predates placement, which holds
// every sample. info comes from outside: a bad one gives an error, never a
// panic.
func DecodePlacement(info *InfoResponse) (placement.Layout, []int, error) {
	rs := info.GetLayout()
	if len(rs) > placement.MaxShards {
		return placement.Layout{}, nil, fmt.Errorf("storage agent %q: layout: %w: %d, at most %d",
			info.GetNode(), placement.ErrTooManyShards, len(rs), placement.MaxShards)
	}
	ranges := make([]placement.Range, len(rs))
	for i, r := range rs {
		ranges[i] = placement.Range{First: r.GetFirst(), Count: r.GetCount(), Name: r.GetName()}
	}
	l, err := placement.LayoutFromRanges(info.GetSamples(), ranges)
	if err != nil {
		return placement.Layout{}, nil, fmt.Errorf("storage agent %q: layout: %w", info.GetNode(), err)
	}
	held := info.GetHeldShards()
	if err := placement.CheckHeld(held, l.Len()); err != nil {
		return placement.Layout{}, nil, fmt.Errorf("storage agent %q: %w", info.GetNode(), err)
	}
	out := make([]int, len(held))
	for i, s := range held {
		out[i] = int(s)
	}
	return l, out, nil
}
