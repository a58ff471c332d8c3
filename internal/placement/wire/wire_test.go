package wire

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestDecodePlacement: a layout and held set survive the wire, and bad ones
// fail with placement's sentinels.
func TestDecodePlacement(t *testing.T) {
	l, err := placement.Uniform(10, 4)
	if err != nil {
		t.Fatal(err)
	}
	info := &dataplanepb.InfoResponse{Node: "s1", Samples: 10, Layout: ShardRanges(l), HeldShards: []uint32{0, 2}, Replicas: 2}
	b, err := proto.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	var back dataplanepb.InfoResponse
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got, held, err := DecodePlacement(&back)
	if err != nil {
		t.Fatalf("DecodePlacement: %v", err)
	}
	if got.Digest() != l.Digest() || !slices.Equal(held, []int{0, 2}) {
		t.Errorf("DecodePlacement: layout %v held %v, want %v held [0 2]", got.Ranges(), held, l.Ranges())
	}

	tests := []struct {
		name string
		edit func(*dataplanepb.InfoResponse)
		want error
	}{
		{"no layout (an older agent)", func(i *dataplanepb.InfoResponse) { i.Layout = nil }, placement.ErrNoShards},
		{"samples disagree", func(i *dataplanepb.InfoResponse) { i.Samples = 11 }, placement.ErrTotal},
		{"gap", func(i *dataplanepb.InfoResponse) { i.Layout[1].First = 5 }, placement.ErrGap},
		{"held past the layout", func(i *dataplanepb.InfoResponse) { i.HeldShards = []uint32{3} }, placement.ErrHeld},
		{"held twice", func(i *dataplanepb.InfoResponse) { i.HeldShards = []uint32{1, 1} }, placement.ErrHeld},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := proto.Clone(info).(*dataplanepb.InfoResponse)
			tt.edit(bad)
			if _, _, err := DecodePlacement(bad); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	// A nil Info reads as an empty catalog of no shards.
	if l, held, err := DecodePlacement(nil); err != nil || l.Len() != 0 || len(held) != 0 {
		t.Errorf("DecodePlacement(nil): %v, %v, %v; want an empty layout", l.Ranges(), held, err)
	}
}

// TestDecodeMissing: the shards an agent does not store survive the wire;
// a list out of order, past the layout or overlapping the held shards is
// refused with placement.ErrHeld.
func TestDecodeMissing(t *testing.T) {
	l, err := placement.Uniform(10, 4) // 3 shards
	if err != nil {
		t.Fatal(err)
	}
	info := &dataplanepb.InfoResponse{Node: "s1", Samples: 10, Layout: ShardRanges(l), HeldShards: []uint32{0}, MissingShards: []uint32{1, 2}}
	miss, err := DecodeMissing(info, l, []int{0})
	if err != nil || !slices.Equal(miss, []int{1, 2}) {
		t.Fatalf("DecodeMissing: %v, %v; want [1 2]", miss, err)
	}
	if miss, err := DecodeMissing(&dataplanepb.InfoResponse{}, l, nil); err != nil || len(miss) != 0 {
		t.Errorf("DecodeMissing(none): %v, %v; want every shard stored", miss, err)
	}
	for name, bad := range map[string][]uint32{
		"past the layout": {3},
		"descending":      {2, 1},
		"repeated":        {1, 1},
		"also held":       {0, 2},
	} {
		info.MissingShards = bad
		if _, err := DecodeMissing(info, l, []int{0}); !errors.Is(err, placement.ErrHeld) {
			t.Errorf("%s %v: got %v, want ErrHeld", name, bad, err)
		}
	}
}
