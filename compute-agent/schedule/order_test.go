package schedule

import (
	"slices"
	"testing"
)

func TestOrder(t *testing.T) {
	a := Order(7, 0, 0, 1, 100)
	b := Order(7, 0, 0, 1, 100)
	c := Order(7, 1, 0, 1, 100)
	if !slices.Equal(a, b) {
		t.Errorf("order is not reproducible")
	}
	if slices.Equal(a, c) {
		t.Errorf("epochs 0 and 1 have the same order")
	}
	if slices.Equal(a, Order(8, 0, 0, 1, 100)) {
		t.Errorf("seeds 7 and 8 have the same order")
	}
	sorted := slices.Sorted(slices.Values(a))
	for i, s := range sorted {
		if s != uint64(i) {
			t.Fatalf("order is not a permutation: %v", sorted)
		}
	}
	for _, tc := range []struct{ world, total int }{{1, 0}, {3, 100}, {4, 3}, {7, 64}} {
		seen := map[uint64]int{}
		for r := range tc.world {
			for _, s := range Order(1, 2, r, tc.world, uint64(tc.total)) {
				if int(s%uint64(tc.world)) != r {
					t.Errorf("world %d: rank %d got sample %d", tc.world, r, s)
				}
				seen[s]++
			}
		}
		if len(seen) != tc.total {
			t.Errorf("world %d total %d: ranks cover %d samples", tc.world, tc.total, len(seen))
		}
		for s, n := range seen {
			if n != 1 {
				t.Errorf("sample %d in %d shards", s, n)
			}
		}
	}
}

func TestRankOrderEqualCounts(t *testing.T) {
	for _, drop := range []bool{false, true} {
		var counts []int
		ids := map[uint64]int{}
		for r := range 3 {
			o := RankOrder(1, 0, r, 3, 1001, 32, drop)
			counts = append(counts, (len(o)+31)/32)
			for _, s := range o {
				ids[s]++
			}
		}
		if counts[0] != counts[1] || counts[1] != counts[2] {
			t.Errorf("drop_last=%v: batches per rank %v", drop, counts)
		}
		want := 11
		if drop {
			want = 10
		}
		if counts[0] != want || RankBatches(3, 1001, 32, drop) != want {
			t.Errorf("drop_last=%v: %d batches, want %d", drop, counts[0], want)
		}
		if !drop && len(ids) != 1001 {
			t.Errorf("padded epoch covers %d samples, want all 1001", len(ids))
		}
	}
}
