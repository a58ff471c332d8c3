package bucket

import (
	"math"
	"slices"
	"testing"
)

func TestLevels(t *testing.T) {
	cuts := Levels([]float64{4, 3, 2, 1, 8, 7, 6, 5}, 4)
	if !slices.Equal(cuts, []float64{3, 5, 7}) {
		t.Fatalf("cuts %v", cuts)
	}
	for x, want := range map[float64]int{0: 0, 3: 0, 3.5: 1, 7: 2, 9: 3} {
		if l := Level(x, cuts); l != want {
			t.Errorf("Level(%v) = %d, want %d", x, l, want)
		}
	}
}

// TestPrune: an option another beats or equals on all three quantities,
// and one without data, are not worth pricing; of two equal ones the first
// stays.
func TestPrune(t *testing.T) {
	inf := math.Inf(1)
	bk := New(4, 2, 0)
	b := bk.Add(1, 2)
	bk.Put(0, b, [][3]float64{{1, 1, 1}, {0, 2, 2}, {1, 1, 1}, {inf, 0, 0}})
	bk.Put(1, b, [][3]float64{{1, 0, 1}, {1, 1, 1}, {1, 0, 1}, {inf, 0, 0}})
	bk.Prune()
	if bk.N != 1 || bk.Count[0] != 2 || !slices.Equal(bk.Of, []int32{0, 0}) {
		t.Fatalf("buckets %+v", bk)
	}
	if !slices.Equal(bk.Opts, []uint8{0, 1}) || !slices.Equal(bk.OptAt, []int32{0, 2}) {
		t.Fatalf("options %v at %v", bk.Opts, bk.OptAt)
	}
	if !slices.Equal(bk.OptTot, [][3]float64{{2, 1, 2}, {1, 3, 3}}) || bk.Tot != nil {
		t.Fatalf("totals %v", bk.OptTot)
	}
}

func TestIndex(t *testing.T) {
	for _, keys := range []int{10, 1<<22 + 1} {
		x := NewIndex(keys)
		if _, ok := x.Get(7); ok {
			t.Fatalf("%d keys: empty index has 7", keys)
		}
		x.Put(7, 3)
		if b, ok := x.Get(7); !ok || b != 3 {
			t.Fatalf("%d keys: got %d %v", keys, b, ok)
		}
	}
}
