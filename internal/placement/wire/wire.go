// Package wire carries a placement over the data plane: a [placement.Layout]
// as the InfoResponse's shard ranges, and the checks a compute agent runs on
// what a storage agent's Info announces (layout, held and missing shards).
// It sits above both proto/dataplanepb and internal/placement, so the wire
// contract imports nothing of the module.
package wire

import (
	"fmt"

	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// ShardRanges is l on the wire (InfoResponse.layout).
func ShardRanges(l placement.Layout) []*dataplanepb.ShardRange {
	out := make([]*dataplanepb.ShardRange, l.Len())
	for i := range out {
		r := l.Shard(i)
		out[i] = &dataplanepb.ShardRange{First: r.First, Count: r.Count, Name: r.Name}
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
func DecodePlacement(info *dataplanepb.InfoResponse) (placement.Layout, []int, error) {
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

// DecodeMissing checks and decodes the shards of l that a storage agent's
// Info says it does not store (info.missing_shards: ascending, within l,
// none of them among held, which DecodePlacement returned for the same
// Info). An empty list means the agent stores every shard. Its errors wrap
// placement.ErrHeld.
func DecodeMissing(info *dataplanepb.InfoResponse, l placement.Layout, held []int) ([]int, error) {
	miss := info.GetMissingShards()
	if err := placement.CheckHeld(miss, l.Len()); err != nil {
		return nil, fmt.Errorf("storage agent %q: missing shards: %w", info.GetNode(), err)
	}
	out := make([]int, len(miss))
	for i, s := range miss {
		out[i] = int(s)
	}
	for i, j := 0, 0; i < len(out) && j < len(held); {
		switch {
		case out[i] == held[j]:
			return nil, fmt.Errorf("storage agent %q: %w: shard %d is both held and missing", info.GetNode(), placement.ErrHeld, out[i])
		case out[i] < held[j]:
			i++
		default:
			j++
		}
	}
	return out, nil
}
