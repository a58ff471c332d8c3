package engine

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
)

func testWindow(count int) *schedule.Window {
	return &schedule.Window{MaxCount: count, MaxBytes: 1 << 30, Outstanding: map[uint64]*schedule.Request{}}
}

// TestScheduleCPUCap: a window whose storage CPU estimate is full takes
// raw positions past the offloaded ones it cannot queue, and offloads
// again once an offload is answered or released.
func TestScheduleCPUCap(t *testing.T) {
	off := []bool{true, true, true, true, false, false, false, false}
	s := schedule.NewSchedule(len(off), 0, 1, off)
	s.CPUOf = func(pos, k int) int64 { return 10 }
	w := testWindow(8)
	w.MaxCPU = 20
	estOff := func(pos int) (int64, uint64, int) {
		k := 0
		if off[pos] {
			k = 1
		}
		return 1, uint64(pos), k
	}
	var got []int
	for {
		r, _, done := s.Take(w, estOff)
		if done || r == nil {
			break
		}
		got = append(got, r.Pos)
	}
	if !slices.Equal(got, []int{0, 1, 4, 5, 6, 7}) || w.CPU != 20 {
		t.Fatalf("took %v with %d ns of CPU, want the offloads 0 and 1 (20 ns), then the raw ones", got, w.CPU)
	}
	for _, r := range w.Outstanding {
		if r.Pos == 0 {
			s.Release(w, r)
			delete(w.Outstanding, r.Tag)
		}
	}
	if r, _, _ := s.Take(w, estOff); r == nil || r.Pos != 2 || w.CPU != 20 {
		t.Fatalf("after releasing an offload: took %v, want position 2", r)
	}
	// An answered offload's CPU leaves the window at once, before its
	// worker releases it (its slot and bytes stay held until then).
	var tag uint64
	for _, r := range w.Outstanding {
		if r.Pos == 1 {
			tag = r.Tag
		}
	}
	count := w.Count
	if r, _ := s.Claim(w, tag, 1); r == nil || w.CPU != 10 || w.Count != count {
		t.Fatalf("after the answer to position 1: %d ns of CPU and %d requests held, want 10 and %d", w.CPU, w.Count, count)
	}
	if r, _, _ := s.Take(w, estOff); r == nil || r.Pos != 3 || w.CPU != 20 {
		t.Fatalf("after an answered offload: took %v, want position 3", r)
	}
}

// TestPace: with several storage agents a fetcher's window bytes follow
// what its agent delivers: linkwatch.PaceTime of its measured rate, at least four
// average responses, at most Config.WindowBytes; before its 8th response,
// and with one agent, the window is left alone.
func TestPace(t *testing.T) {
	cfg := &Config{WindowBytes: 64 << 20}
	e := &Epoch{cfg: cfg, paced: true}
	e.sched = schedule.NewSchedule(1, 0, 1, nil)
	f := testFetcher(e, 1, 1)
	f.stripes[0].w.MaxBytes = cfg.WindowBytes
	t0 := time.Unix(100, 0)
	f.pace(t0) // the first response starts the clock
	f.served.Store(4)
	f.servedBytes.Store(4 << 20)
	f.pace(t0.Add(time.Second))
	if f.stripes[0].w.MaxBytes != cfg.WindowBytes {
		t.Fatalf("after 4 responses: %d bytes, want the window untouched", f.stripes[0].w.MaxBytes)
	}
	f.served.Store(100)
	f.servedBytes.Store(10 << 20) // 10 MiB in 1 s, 100 KiB each
	f.pace(t0.Add(time.Second))
	if want := int64(float64(10<<20) * linkwatch.PaceTime.Seconds()); f.stripes[0].w.MaxBytes != want {
		t.Errorf("at 10 MiB/s: %d bytes, want %d (linkwatch.PaceTime of it)", f.stripes[0].w.MaxBytes, want)
	}
	f.pace(t0.Add(100 * time.Second)) // 0.1 MiB/s: the floor of 4 responses
	if want := int64(4 * (10 << 20) / 100); f.stripes[0].w.MaxBytes != want {
		t.Errorf("at 0.1 MiB/s: %d bytes, want the floor %d", f.stripes[0].w.MaxBytes, want)
	}
	f.servedBytes.Store(10 << 30) // 10 GiB in 1 s: the ceiling
	f.pace(t0.Add(time.Second))
	if f.stripes[0].w.MaxBytes != cfg.WindowBytes {
		t.Errorf("at 10 GiB/s: %d bytes, want the ceiling %d", f.stripes[0].w.MaxBytes, cfg.WindowBytes)
	}
	one := testFetcher(&Epoch{cfg: cfg}, 1, 1)
	one.stripes[0].w.MaxBytes = 7
	one.served.Store(100)
	one.servedBytes.Store(100)
	one.pace(t0)
	one.pace(t0.Add(time.Second))
	if one.stripes[0].w.MaxBytes != 7 {
		t.Errorf("one agent: window bytes %d, want untouched", one.stripes[0].w.MaxBytes)
	}
}

// TestCapLanes: with one storage agent the raw fetches in flight hold
// linkwatch.RawLead of the planner's link (at least four average files) and the
// offloads linkwatch.OffloadLead of the agent's cores (at least one); with several
// agents the offloads hold linkwatch.PaceTime and the raw lane is left to pace; an
// unknown link rate leaves the raw lane unbounded.
func TestCapLanes(t *testing.T) {
	for _, c := range []struct {
		name          string
		paced         bool
		cpus, rate    float64
		meanRaw       int64
		wantCPU, want int64
	}{
		{"half a core", false, 0.5, 12.5e6, 100_000, int64(linkwatch.OffloadLead), int64(12.5e6 * linkwatch.RawLead.Seconds())},
		{"two cores", false, 2, 12.5e6, 100_000, int64(2 * linkwatch.OffloadLead), int64(12.5e6 * linkwatch.RawLead.Seconds())},
		{"large files", false, 1, 12.5e6, 1 << 20, int64(linkwatch.OffloadLead), 4 << 20},
		{"link unknown", false, 1, 0, 100_000, int64(linkwatch.OffloadLead), 0},
		{"several agents", true, 1, 12.5e6, 100_000, int64(linkwatch.PaceTime), 0},
	} {
		for _, conns := range []int{1, 4} {
			f := testFetcher(&Epoch{paced: c.paced, meanRaw: c.meanRaw}, c.cpus, conns)
			f.capLanes(true, c.rate)
			var cpu, raw int64
			for _, s := range f.stripes {
				cpu += s.w.MaxCPU
				raw += s.w.MaxRawFlight
			}
			// Each of the stripes holds its share, rounded up.
			if cpu < c.wantCPU || cpu >= c.wantCPU+int64(conns) || raw < c.want || raw >= c.want+int64(conns) {
				t.Errorf("%s, %d conns: %d ns, %d raw bytes; want %d and %d", c.name, conns, cpu, raw, c.wantCPU, c.want)
			}
		}
	}
	f := testFetcher(&Epoch{}, 1, 1)
	f.capLanes(false, 12.5e6)
	if w := f.stripes[0].w; w.MaxCPU != 0 {
		t.Errorf("without hints: %d ns, want no CPU bound", w.MaxCPU)
	}
}

// testFetcher is a Fetcher in epoch e of an agent with cpus cores, over
// conns stripes.
func testFetcher(e *Epoch, cpus float64, conns int) *Fetcher {
	f := &Fetcher{e: e}
	f.setCPUs(cpus)
	for i := range conns {
		f.stripes = append(f.stripes, &stripe{f: f, idx: i})
	}
	return f
}

// TestWorkerShareIsTheBudgets: the share of a core a storage agent's
// budget time is counted in is its whole budget's per worker, whatever
// share of it this job plans for: a job with half of a 1-core agent still
// reads its offloads at a whole core (it read them at half, so its
// storage side twice as fast as it was).
func TestWorkerShareIsTheBudgets(t *testing.T) {
	for _, tc := range []struct {
		budget, job, want float64
	}{{1, 0.5, 1}, {1, 0, 1}, {2.5, 1.25, 2.5 / 3}, {0.5, 0.25, 0.5}, {0, 0, 1}} {
		f := testFetcher(nil, tc.budget, 1)
		f.shareCPUs = tc.job
		if got := f.share(); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("budget %g, job's share %g: worker share %g, want %g", tc.budget, tc.job, got, tc.want)
		}
		if tc.job > 0 && f.CPUs() != tc.job {
			t.Errorf("budget %g, job's share %g: plans for %g cores", tc.budget, tc.job, f.CPUs())
		}
	}
}
