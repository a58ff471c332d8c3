package planner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/synthetic"
	"github.com/sophon-dl/sophon/profiler"
)

// feed steps f from t0 + from to t0 + to every resplitTick with the bytes
// and storage time of rate bytes/s and busy cores (both from *bytes and
// *storage on), and returns the first move with its time, if any. The
// epoch tells no link busy time.
func feed(f *follower, t0 time.Time, from, to time.Duration, rate, busy float64, bytes *float64, storage *float64) (move, time.Duration) {
	return feedLink(f, t0, from, to, rate, busy, 0, bytes, storage)
}

// feedLink is feed with the links' delivery rate delivery (0: not told).
func feedLink(f *follower, t0 time.Time, from, to time.Duration, rate, busy, delivery float64, bytes, storage *float64) (move, time.Duration) {
	for d := from; d < to; d += resplitTick {
		*bytes += rate * resplitTick.Seconds()
		*storage += busy * 1e9 * resplitTick.Seconds()
		if m := f.step(mark{at: t0.Add(d), bytes: int64(*bytes), storageNS: int64(*storage), delivery: delivery}); m.kind != "" {
			return m, d
		}
	}
	return move{}, to
}

// TestFollowerDropAndRecovery: a link that halves re-splits down within
// the hold plus a window of the drop, at about the rate it dropped to;
// under the low plan (storage-bound, the epoch receives what its storage
// side makes) a link that came back is found by a probe of the first
// plan, which re-splits up at the rate it measured; a probe on a link
// still slow reverts.
func TestFollowerDropAndRecovery(t *testing.T) {
	const R = 12.5e6
	t0 := time.Unix(1000, 0)
	for _, back := range []bool{true, false} {
		f := newFollower(ResplitConfig{}, 1, R)
		var bytes, storage float64
		if m, at := feed(f, t0, 0, 3*time.Second, R, 0.9, &bytes, &storage); m.kind != "" {
			t.Fatalf("move %+v at %v before the drop", m, at)
		}
		m, at := feed(f, t0, 3*time.Second, 8*time.Second, R/2, 0.5, &bytes, &storage)
		if m.kind != report.ResplitLink || m.up || at > 3*time.Second+DefaultResplitHold+resplitWindow+resplitTick {
			t.Fatalf("after the drop: move %+v at %v, want a re-split within hold + window", m, at)
		}
		if m.measured < 0.4*R || m.measured > 0.7*R {
			t.Errorf("re-split at %.0f B/s measured, want about %.0f", m.measured, R/2)
		}
		f.changedTo(t0.Add(at), m.measured)
		low := m.measured
		rate := R / 2
		if back {
			rate = low // storage-bound under the low plan: what it makes
		}
		m, pat := feed(f, t0, at+resplitTick, at+10*time.Second, rate, 1, &bytes, &storage)
		if m.kind != report.ResplitProbe || pat-at < probeAfter {
			t.Fatalf("low plan: move %+v %v after the re-split, want a probe after %v", m, pat-at, probeAfter)
		}
		f.changedTo(t0.Add(pat), R)
		rate = R / 2
		if back {
			rate = R
		}
		m, end := feed(f, t0, pat+resplitTick, pat+5*time.Second, rate, 0.9, &bytes, &storage)
		want := report.ResplitRevert
		if back {
			want = report.ResplitLink
		}
		if m.kind != want || end-pat < probeSpan {
			t.Fatalf("link back %v: probe ended with %+v after %v, want %s after %v", back, m, end-pat, want, probeSpan)
		}
		if back && (m.measured < 0.85*R || !m.up) {
			t.Errorf("re-split up at %.0f B/s, want about %.0f", m.measured, R)
		}
	}
}

// TestFollowerBusyStorage: a drop re-splits when the links' delivery rate
// fell with it (the link halved under a balanced plan, its storage side
// busy), not when it held (the storage side slowed and sends in bursts at
// the link's rate; the storage side idle, the epoch's tail), nor, with
// the storage side busy, when the epoch does not tell it.
func TestFollowerBusyStorage(t *testing.T) {
	const R = 10e6
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name          string
		before, after float64 // the links' delivery rate (0: not told)
		want          bool
	}{
		{"link halved under a balanced plan", 1.05 * R, 0.52 * R, true},
		{"storage side slowed", 1.05 * R, 1.02 * R, false},
		{"delivery not told", 0, 0, false},
		{"delivery down less than the threshold", 1.05 * R, 0.8 * R, false},
		// The storage side idle and the link as fast: the epoch's tail,
		// or a compute side short of CPU, not the link.
		{"storage side idle, link as fast", 1.05 * R, 1.02 * R, false},
	} {
		f := newFollower(ResplitConfig{}, 1, R)
		var bytes, storage float64
		busy := 0.95
		if strings.Contains(c.name, "idle") {
			busy = 0.2
		}
		if m, at := feedLink(f, t0, 0, 3*time.Second, R, 0.9, c.before, &bytes, &storage); m.kind != "" {
			t.Fatalf("%s: move %+v at %v before the drop", c.name, m, at)
		}
		// A sample from a burst the queue let through at once, held by
		// the kernel for a while, does not hide the link's rate.
		spike := c.after
		if spike > 0 {
			spike = 40 * R
		}
		if m, at := feedLink(f, t0, 3*time.Second, 3600*time.Millisecond, R/2, busy, spike, &bytes, &storage); m.kind != "" {
			t.Fatalf("%s: move %+v at %v with the spike", c.name, m, at)
		}
		m, at := feedLink(f, t0, 3600*time.Millisecond, 8*time.Second, R/2, busy, c.after, &bytes, &storage)
		if got := m.kind == report.ResplitLink && !m.up; got != c.want {
			t.Errorf("%s: move %+v at %v, want a re-split down %t", c.name, m, at, c.want)
			continue
		}
		if c.want && (!strings.Contains(m.why, "link delivery 5200000 B/s") || !strings.Contains(m.why, "storage side 95% busy")) {
			t.Errorf("%s: reason %q, want the link's delivery rate and the storage side's load", c.name, m.why)
		}
	}
}

// TestFollowerHolds: a slower epoch whose storage side is busy (it, not
// the link, fell behind), an epoch slower than its plan throughout, a dip
// shorter than the hold and the epoch's ramp-up do not re-split; a link that swings back and forth re-splits at
// most Max times.
func TestFollowerHolds(t *testing.T) {
	const R = 10e6
	t0 := time.Unix(1000, 0)
	var bytes, storage float64
	f := newFollower(ResplitConfig{}, 1, R)
	if m, at := feed(f, t0, 0, 900*time.Millisecond, R/5, 1, &bytes, &storage); m.kind != "" {
		t.Fatalf("ramp-up: move %+v at %v", m, at)
	}
	if m, at := feed(f, t0, 900*time.Millisecond, 3*time.Second, R, 0.9, &bytes, &storage); m.kind != "" {
		t.Fatalf("steady: move %+v at %v", m, at)
	}
	if m, at := feed(f, t0, 3*time.Second, 8*time.Second, R/2, 0.95, &bytes, &storage); m.kind != "" {
		t.Fatalf("storage busy: move %+v at %v, want none", m, at)
	}
	// Slower than its plan throughout (the compute side short of CPU):
	// the between-epoch drift's to correct.
	f = newFollower(ResplitConfig{}, 1, R)
	bytes, storage = 0, 0
	if m, at := feed(f, t0, 0, 10*time.Second, 0.6*R, 0.5, &bytes, &storage); m.kind != "" {
		t.Fatalf("steady under the plan's rate: move %+v at %v", m, at)
	}
	f = newFollower(ResplitConfig{}, 1, R)
	bytes, storage = 0, 0
	feed(f, t0, 0, 3*time.Second, R, 0.5, &bytes, &storage)
	if m, at := feed(f, t0, 3*time.Second, 3*time.Second+600*time.Millisecond, R/2, 0.5, &bytes, &storage); m.kind != "" {
		t.Fatalf("short dip: move %+v at %v", m, at)
	}
	if m, at := feed(f, t0, 3*time.Second+600*time.Millisecond, 6*time.Second, R, 0.5, &bytes, &storage); m.kind != "" {
		t.Fatalf("after a short dip: move %+v at %v", m, at)
	}

	f = newFollower(ResplitConfig{Max: 2}, 1, R)
	bytes, storage = 0, 0
	moves := 0
	at := time.Duration(0)
	for i := range 12 {
		rate := R
		if i%2 == 0 {
			rate = R / 3
		}
		next := at + 4*time.Second
		for at < next {
			m, d := feed(f, t0, at, next, rate, 0.3, &bytes, &storage)
			at = d + resplitTick
			if m.kind == "" {
				continue
			}
			moves++
			f.changedTo(t0.Add(d), m.measured)
		}
	}
	if moves == 0 || moves > 2*2 {
		t.Errorf("%d moves on a swinging link, want some and at most %d re-splits and %d probes", moves, 2, 2)
	}
}

// linkEpoch is an Epoch on a link whose rate follows a schedule of fake
// time: Now advances a tick per call, the bytes follow the link (or, under
// a plan for a lower rate, that rate: it is storage-bound), and Swap
// records each plan.
type linkEpoch struct {
	mu     sync.Mutex
	t0, at time.Time
	tick   time.Duration
	bytes  float64
	rate   func(d time.Duration) float64
	plan   float64 // the current plan's rate
	plans  []*RunPlan
	shard  int
	total  time.Duration
}

func (e *linkEpoch) now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at = e.at.Add(e.tick)
	e.bytes += min(e.rate(e.at.Sub(e.t0)), e.plan) * e.tick.Seconds()
	return e.at
}

func (e *linkEpoch) BytesReceived() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return int64(e.bytes)
}
func (e *linkEpoch) Observations() []profiler.Observation { return nil }
func (e *linkEpoch) Offloads() *Offloads                  { return &Offloads{} }
func (e *linkEpoch) Swap(p *RunPlan, _ func(uint64) int, rate, _ float64) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.plans, e.plan = append(e.plans, p), rate
	return int(float64(e.shard) * float64(e.at.Sub(e.t0)) / float64(e.total))
}

// TestRunFollowsTheLink drives a planned epoch's Started and Annotate on
// a link that halves from 3 s to 6 s of a 14 s epoch: the plan re-splits
// down to a plan that offloads more, a probe finds the link back and it
// re-splits up; the report lists them with their times, rates and the
// new plans' predicted remaining time, and the next epoch plans from the
// rate last measured. With Resplit.Off nothing is swapped.
func TestRunFollowsTheLink(t *testing.T) {
	const R = 25e6 // balanced: the plan keeps a third of the samples raw
	for _, off := range []bool{false, true} {
		prof := synthetic.ProfileCut("openimages-like", 200, 3)
		res := policy.Resources{LinkBytesPerSec: R, StorageCores: 0.25, ComputeCores: 4, StorageSpeed: 1, StorageNSPerByte: 1}
		t0 := time.Unix(1000, 0)
		e := &linkEpoch{t0: t0, at: t0, tick: resplitTick, plan: R, shard: 200, total: 14 * time.Second, rate: func(d time.Duration) float64 {
			if d >= 3*time.Second && d < 6*time.Second {
				return R / 2
			}
			return R
		}}
		h := &Host{Log: zerolog.Nop(), Now: e.now, Policy: policy.NameOptimal, Threshold: 0.2,
			Resplit: ResplitConfig{Off: off, Tick: time.Millisecond},
			SplitOf: func(p *RunPlan) func(uint64) (int, error) {
				return func(s uint64) (int, error) { return 0, nil }
			}}
		pl := &Planner{Name: policy.NameOptimal, Res: res, Prof: prof, Log: zerolog.Nop()}
		if err := pl.Replan(); err != nil {
			t.Fatal(err)
		}
		run := &Run{h: h, pl: pl, cat: &Catalog{}, shard: 200}
		opts := run.Next(1, 1)
		ended := make(chan struct{})
		wait := opts.Started(context.Background(), e, ended)
		for done := false; !done; {
			time.Sleep(time.Millisecond)
			e.mu.Lock()
			done = e.at.Sub(t0) >= e.total
			e.mu.Unlock()
		}
		close(ended)
		wait()
		r := report.EpochReport{Epoch: 1, Seconds: 14, BytesReceived: int64(R * 12.5)}
		if err := opts.Annotate(&r, e); err != nil {
			t.Fatal(err)
		}
		if off {
			if len(e.plans) != 0 || len(r.Resplits) != 0 {
				t.Errorf("resplit off: %d swaps, %d re-splits reported", len(e.plans), len(r.Resplits))
			}
			continue
		}
		var kinds []string
		for _, rs := range r.Resplits {
			kinds = append(kinds, rs.Kind)
			if !(rs.AtSeconds > 0) || !(rs.PredictedRemainingSeconds > 0) || rs.Reason == "" || rs.NewBytesPerSec <= 0 || rs.PlanBytesPerSec <= 0 {
				t.Errorf("re-split %+v: want its time, rates, reason and prediction", rs)
			}
		}
		if got := strings.Join(kinds, ","); !strings.HasPrefix(got, "link,probe,link") {
			t.Fatalf("re-splits %s (%+v), want link, probe, link", got, r.Resplits)
		}
		down, up := r.Resplits[0], r.Resplits[2]
		if down.AtSeconds < 3 || down.AtSeconds > 3+DefaultResplitHold.Seconds()+resplitWindow.Seconds()+0.5 || down.NewBytesPerSec > 0.7*R {
			t.Errorf("down %+v: want within the hold and a window of 3 s, at about half the rate", down)
		}
		if up.AtSeconds < 6 || up.NewBytesPerSec < 0.85*R {
			t.Errorf("up %+v: want after 6 s at about the full rate", up)
		}
		lowPlan := e.plans[0]
		if lowPlan == nil || lowPlan == e.plans[1] {
			t.Fatalf("plans swapped in %v", e.plans)
		}
		if e.plans[1] != opts.Plan {
			t.Errorf("the probe ran %v, want the epoch's first plan %v", e.plans[1].Name(), opts.Plan.Name())
		}
		if got := r.Resplits[0]; got.PredictedRemainingSeconds <= 0 {
			t.Errorf("down: no prediction")
		}
		// The plan for half the link sends fewer bytes (offloads more).
		if low := countRaw(lowPlan); low >= countRaw(opts.Plan) {
			t.Errorf("plan for half the link keeps %d samples raw, the first plan %d: want more offload", low, countRaw(opts.Plan))
		}
		if pl.Res.LinkBytesPerSec != up.NewBytesPerSec || !r.Replanned || !strings.Contains(r.ReplanReason, "re-split") {
			t.Errorf("next epoch's link %.0f B/s (replanned %t: %q), want the last measured %.0f", pl.Res.LinkBytesPerSec, r.Replanned, r.ReplanReason, up.NewBytesPerSec)
		}
	}
}

// countRaw is how many of p's samples it keeps raw.
func countRaw(p *RunPlan) int {
	n := 0
	for _, k := range p.plan.Split {
		if k == 0 {
			n++
		}
	}
	return n
}
