package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
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

// TestSeedLinkStartsTheFirstEpoch: a fetcher seeded with stage 1's link
// (SeedLink) starts its epoch with that round trip: its window covers the
// bandwidth-delay product and its storage CPU in flight the round trip,
// where one never seeded starts with neither.
func TestSeedLinkStartsTheFirstEpoch(t *testing.T) {
	const rate, rtt = 12e6, 80 * time.Millisecond
	start := func(seed bool) *Fetcher {
		cfg := &Config{Window: 8, WindowBytes: 64 << 20}
		e := &Epoch{cfg: cfg, sched: schedule.NewSchedule(1, 0, 1, nil), meanEst: 100 << 10}
		e.sched.CPUOf = func(pos, k int) int64 { return 1e6 }
		f := &Fetcher{clients: []dataplanepb.StorageClient{nil, nil}}
		f.setCPUs(1)
		f.SetTCP(nil, &linkwatch.Memory{})
		if seed {
			f.SeedLink(rate, rtt)
		}
		f.e = e
		f.openStripes(0)
		f.capLanes(e.sched.CPUOf != nil, rate) // as prepare does
		f.seedLink()
		return f
	}
	sum := func(f *Fetcher) (count int, cpu int64) {
		for _, s := range f.stripes {
			count += s.w.MaxCount
			cpu += s.w.MaxCPU
		}
		return count, cpu
	}
	cold, warm := start(false), start(true)
	if cold.RTT() != 0 {
		t.Fatalf("unseeded fetcher starts with a round trip of %v", cold.RTT())
	}
	if warm.RTT() != rtt {
		t.Errorf("seeded fetcher starts with a round trip of %v, want %v", warm.RTT(), rtt)
	}
	wantCount := linkwatch.WindowCount(8, int64(linkwatch.BDPFactor*rate*rtt.Seconds()), 100<<10, 64<<20)
	if c, cpu := sum(warm); c < wantCount-1 || cpu < linkwatch.CPULead(1, false, rtt)-1 {
		t.Errorf("seeded: window %d requests, %d ns of CPU; want %d and %d", c, cpu, wantCount, linkwatch.CPULead(1, false, rtt))
	}
	if c, cpu := sum(cold); c != 8 || cpu > linkwatch.CPULead(1, false, 0) {
		t.Errorf("unseeded: window %d requests, %d ns of CPU; want 8 and %d", c, cpu, linkwatch.CPULead(1, false, 0))
	}
}
