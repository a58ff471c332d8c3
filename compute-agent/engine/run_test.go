package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/ops"
)

// TestHorizon: an offload's horizon is the epoch's bytes left over the
// larger of the planner's link rate and the rate measured this epoch.
func TestHorizon(t *testing.T) {
	now := time.Unix(100, 0)
	e := &Epoch{cfg: &Config{Now: func() time.Time { return now }}, linkRate: 1e6, start: now}
	if h := e.horizon(); h != 0 {
		t.Fatalf("horizon %d with nothing left", h)
	}
	e.left.Store(500_000)
	if h := e.horizon(); h != uint64(500*time.Millisecond) {
		t.Fatalf("horizon %v, want 500ms at the planned 1 MB/s", time.Duration(h))
	}
	// 4 MB in 2 s measured: 2 MB/s beats the plan's rate.
	now = now.Add(2 * time.Second)
	e.bytesReceived.Store(4_000_000)
	if h := e.horizon(); h != uint64(250*time.Millisecond) {
		t.Fatalf("horizon %v, want 250ms at the measured 2 MB/s", time.Duration(h))
	}
	e.linkRate = 0
	e.bytesReceived.Store(0)
	if h := e.horizon(); h != 0 {
		t.Fatalf("horizon %v with no rate known", time.Duration(h))
	}
}

// TestRawExtra: a raw answer's extra link time is the raw file's wire
// bytes beyond the offload's estimate, at the horizon's rate; none when
// the raw answer is no larger or no rate is known.
func TestRawExtra(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(100, 0)
	e := &Epoch{cfg: &Config{Now: func() time.Time { return now }, Sizes: schedule.NewSizeModel(p)},
		cat: &catalog.Catalog{RawSizes: []uint64{1_000_000, 10_000}}, linkRate: 1e6, start: now}
	raw := e.cfg.Sizes.Estimate(0, 1_000_000)
	if x := e.rawExtra(0, 200_000); x != uint64(raw-200_000)*1000 {
		t.Fatalf("raw extra %v, want %v: (%d - 200000) bytes at 1 MB/s", time.Duration(x), time.Duration(uint64(raw-200_000)*1000), raw)
	}
	if x := e.rawExtra(1, 200_000); x != 0 {
		t.Fatalf("raw extra %v for a raw file smaller than the offload", time.Duration(x))
	}
	// 4 MB in 2 s measured: the extra halves with the rate.
	now = now.Add(2 * time.Second)
	e.bytesReceived.Store(4_000_000)
	if x := e.rawExtra(0, 200_000); x != uint64(raw-200_000)*500 {
		t.Fatalf("raw extra %v at the measured 2 MB/s, want %v", time.Duration(x), time.Duration(uint64(raw-200_000)*500))
	}
	e.linkRate = 0
	e.bytesReceived.Store(0)
	if x := e.rawExtra(0, 200_000); x != 0 {
		t.Fatalf("raw extra %v with no rate known", time.Duration(x))
	}
}

// TestNextResponsesFirst: a worker takes a waiting response before a
// queued cache hit (the response holds a window slot until finished),
// then the hit; once the fetchers are done it drains the hits and stops.
func TestNextResponsesFirst(t *testing.T) {
	e := &Epoch{work: make(chan work, 2)}
	e.hits = make(chan work, 2)
	hit, resp := work{local: true, r: &schedule.Request{Pos: 1}}, work{r: &schedule.Request{Pos: 2}}
	e.hits <- hit
	e.work <- resp
	ctx := context.Background()
	for i, want := range []int{2, 1} {
		w, ok, err := e.next(ctx)
		if !ok || err != nil || w.r.Pos != want {
			t.Fatalf("job %d: position %v (%v, %v), want %d", i, w.r, ok, err, want)
		}
	}
	e.hits <- hit
	close(e.work)
	if w, ok, _ := e.next(ctx); !ok || !w.local {
		t.Fatalf("after the fetchers: %+v %v, want the queued hit", w, ok)
	}
	if _, ok, err := e.next(ctx); ok || err != nil {
		t.Fatalf("nothing left: %v %v, want the end", ok, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	e2 := &Epoch{work: make(chan work)}
	if _, ok, err := e2.next(cancelled); ok || err == nil {
		t.Fatalf("cancelled: %v %v, want ctx's error", ok, err)
	}
}
