package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
)

// TestStripesShareWindow: an agent's window is split over its stripes
// (count and bytes, at least one request each, no more stripes than the
// window's count), and pacing splits its byte bound the same way.
func TestStripesShareWindow(t *testing.T) {
	for _, c := range []struct {
		window, clients int
		want            []int
	}{
		{64, 1, []int{64}},
		{64, 4, []int{16, 16, 16, 16}},
		{10, 4, []int{3, 3, 2, 2}},
		{2, 4, []int{1, 1}},
	} {
		cfg := &Config{Window: c.window, WindowBytes: 64 << 20}
		f := &Fetcher{e: &Epoch{cfg: cfg, paced: true}}
		for range c.clients {
			f.clients = append(f.clients, nil)
		}
		f.openStripes(3)
		var got []int
		var bytes int64
		for _, s := range f.stripes {
			got = append(got, s.w.MaxCount)
			bytes += s.w.MaxBytes
			if s.w.Idx != 3 {
				t.Errorf("window %d over %d: stripe %d has index %d, want the fetcher's 3", c.window, c.clients, s.idx, s.w.Idx)
			}
		}
		if !slices.Equal(got, c.want) || bytes > cfg.WindowBytes || bytes < cfg.WindowBytes-int64(len(got)) {
			t.Errorf("window %d over %d clients: counts %v, %d bytes; want %v, %d", c.window, c.clients, got, bytes, c.want, cfg.WindowBytes)
		}
	}
	cfg := &Config{Window: 64, WindowBytes: 64 << 20}
	e := &Epoch{cfg: cfg, paced: true, sched: schedule.NewSchedule(1, 0, 1, nil)}
	f := testFetcher(e, 1, 4)
	t0 := time.Unix(100, 0)
	f.pace(t0)
	f.served.Store(100)
	f.servedBytes.Store(10 << 20)
	f.pace(t0.Add(time.Second))
	want := int64(float64(10<<20) * linkwatch.PaceTime.Seconds())
	for _, s := range f.stripes {
		if s.w.MaxBytes != (want+3)/4 {
			t.Errorf("stripe %d: %d bytes, want a quarter of %d", s.idx, s.w.MaxBytes, want)
		}
	}
}
