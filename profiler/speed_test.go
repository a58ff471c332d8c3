package profiler

import (
	"math"
	"testing"
)

func TestSpeedRatio(t *testing.T) {
	for _, tc := range []struct {
		name             string
		compute, storage []int64
		want             float64
	}{
		{"storage twice as slow", []int64{100, 200, 300, 400}, []int64{200, 400, 600, 800}, 0.5},
		{"storage faster", []int64{300, 600, 900}, []int64{100, 200, 300}, 3},
		{"outliers", []int64{100, 100, 100, 100, 100, 100, 100}, []int64{200, 200, 200, 200, 200, 1e7, 1}, 0.5},
		{"zeros ignored", []int64{0, 100, 100, 100, 5}, []int64{200, 200, 0, 200, -1}, 0.5},
		{"even count", []int64{100, 100}, []int64{100, 200}, 0.75},
		{"extra entries ignored", []int64{100, 100, 100}, []int64{400}, 0.25},
		{"nothing usable", []int64{0, 5}, []int64{5, 0}, 0},
		{"empty", nil, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SpeedRatio(tc.compute, tc.storage); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSpeedRatioNoisy(t *testing.T) {
	// Storage 2.5x slower with +-10% noise on both sides and 10% wild
	// outliers: the median stays close.
	var c, s []int64
	x := uint64(1)
	next := func() float64 { x = x*6364136223846793005 + 1442695040888963407; return float64(x>>11) / (1 << 53) }
	for i := range 1000 {
		base := 1e6 * (1 + 4*next())
		c = append(c, int64(base*(0.9+0.2*next())))
		st := base * 2.5 * (0.9 + 0.2*next())
		if i%10 == 0 {
			st *= 50
		}
		s = append(s, int64(st))
	}
	if got := SpeedRatio(c, s); math.Abs(got-0.4) > 0.02 {
		t.Errorf("got %v, want 0.4 +- 0.02", got)
	}
}

func TestStorageCost(t *testing.T) {
	for _, tc := range []struct {
		ns    int64
		speed float64
		want  int64
	}{
		{1000, 0.5, 2000},
		{1000, 2, 500},
		{1000, 3, 333},
		{1000, 0, 1000},
		{1000, -1, 1000},
		{1000, math.NaN(), 1000},
		{1000, math.Inf(1), 1000},
		{math.MaxInt64, 0.01, math.MaxInt64},
		{0, 0.25, 0},
	} {
		if got := StorageCost(tc.ns, tc.speed); got != tc.want {
			t.Errorf("StorageCost(%d, %v) = %d, want %d", tc.ns, tc.speed, got, tc.want)
		}
	}
}
