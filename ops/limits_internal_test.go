package ops

import (
	"testing"
	"time"
)

func TestLimitsDecode(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		lim  Limits
		own  DecodeLimits
		want DecodeLimits
	}{
		{"zero keeps the op's", Limits{}, DecodeLimits{MaxPixels: 5, MaxScans: 3}, DecodeLimits{MaxPixels: 5, MaxScans: 3}},
		{"server lowers the default", Limits{MaxPixels: 100}, DecodeLimits{}, DecodeLimits{MaxPixels: 100}},
		{"spec cannot raise", Limits{MaxPixels: 100}, DecodeLimits{MaxPixels: 1000}, DecodeLimits{MaxPixels: 100}},
		{"spec can lower", Limits{MaxPixels: 100}, DecodeLimits{MaxPixels: 10}, DecodeLimits{MaxPixels: 10}},
		{"above the default changes nothing", Limits{MaxPixels: 1 << 40}, DecodeLimits{}, DecodeLimits{}},
		{"smaller of each", Limits{MaxScans: 64, MaxMemory: 1 << 20, MaxOutputBytes: 7, Deadline: t0},
			DecodeLimits{MaxScans: 8, MaxMemory: 1 << 30, Deadline: t0.Add(time.Second)},
			DecodeLimits{MaxScans: 8, MaxMemory: 1 << 20, MaxBytes: 7, Deadline: t0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.lim.decode(c.own); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
