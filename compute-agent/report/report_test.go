package report

import (
	"slices"
	"testing"
)

// TestSplitCounter: samples and bytes tallied by split, listed by
// ascending split.
func TestSplitCounter(t *testing.T) {
	c := SplitCounter{}
	for _, s := range []struct {
		k     int
		bytes int64
	}{{3, 10}, {0, 100}, {3, 20}, {1, 5}} {
		c.Add(s.k, s.bytes)
	}
	want := []SplitStats{{0, 1, 100}, {1, 1, 5}, {3, 2, 30}}
	if got := c.List(); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
