package stage1

import (
	"context"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestSpeedEstimate: the speed is the ratio of the sums (a sample's
// weight is its cost, as in an epoch's sum), pairs with a cost that is
// not positive are skipped, and the relative standard error is zero for
// pairs in one ratio and grows with their scatter.
func TestSpeedEstimate(t *testing.T) {
	for _, tc := range []struct {
		name          string
		local, remote []float64
		speed, rse    float64
	}{
		{"none", nil, nil, 0, 0},
		{"one", []float64{4}, []float64{5}, 0.8, 0},
		{"exact", []float64{2, 4, 8}, []float64{2.5, 5, 10}, 0.8, 0},
		{"skips", []float64{2, 0, 8, 3}, []float64{2.5, 7, 10, -1}, 0.8, 0},
		// Sums 20 and 20; deviations 10-10, 10-10... ratio 1 with
		// scatter: (1-3)^2 + (3-1)^2 over n-1 = 8, / n = 4, sqrt = 2, over
		// the mean remote 2: 1, over the speed 1: 1.
		{"scatter", []float64{1, 3}, []float64{3, 1}, 1, 1},
		// The median of the ratios (1/10, 1, 1) is 1; the sums weigh the
		// costly sample: 12/21.
		{"weighted", []float64{1, 1, 10}, []float64{10, 1, 10}, 12.0 / 21, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			speed, rse := speedEstimate(tc.local, tc.remote)
			if math.Abs(speed-tc.speed) > 1e-12 {
				t.Errorf("speed %v, want %v", speed, tc.speed)
			}
			if !math.IsNaN(tc.rse) && math.Abs(rse-tc.rse) > 1e-12 {
				t.Errorf("rse %v, want %v", rse, tc.rse)
			}
		})
	}
	// More pairs with the same scatter: a smaller error.
	few := []float64{9, 11, 10, 10}
	many := append(append(append([]float64{}, few...), few...), few...)
	ones := func(n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = 10
		}
		return out
	}
	_, rFew := speedEstimate(few, ones(len(few)))
	_, rMany := speedEstimate(many, ones(len(many)))
	if !(rMany > 0 && rMany < rFew) {
		t.Errorf("rse over %d pairs %v, over %d %v: want a smaller positive one over more", len(many), rMany, len(few), rFew)
	}
}

// TestEffectiveNS: the budget time times the worker's share, never below
// the thread CPU; the thread CPU from an agent without budget time.
func TestEffectiveNS(t *testing.T) {
	for _, tc := range []struct {
		name           string
		thread, budget int64
		cpus           float64
		want           int64
	}{
		{"no budget time", 7e6, 0, 0.5, 7e6},
		{"whole budget", 7e6, 14e6, 0.5, 7e6},     // busy/share
		{"throttled", 7e6, 20e6, 0.5, 10e6},       // the quota held it
		{"quarter core", 5e6, 28e6, 0.25, 7e6},    // one worker at 0.25
		{"2.5 cores", 5e6, 9e6, 2.5, 7.5e6},       // 3 workers at 0.833
		{"whole cores", 5e6, 6e6, 2, 6e6},         // share 1
		{"unknown cores", 5e6, 6e6, 0, 6e6},       // share 1
		{"budget below thread", 5e6, 2e6, 1, 5e6}, // never below
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, share := workerShare(tc.cpus)
			if got := effectiveNS(tc.thread, tc.budget, share); math.Abs(float64(got-tc.want)) > 1 {
				t.Errorf("effectiveNS(%d, %d, share %v) = %d, want %d", tc.thread, tc.budget, share, got, tc.want)
			}
		})
	}
}

// memSource is a Source over an enginetest storage agent.
type memSource struct {
	c    dataplanepb.StorageClient
	cpus float64
}

func (m memSource) Name() string                      { return "mem" }
func (m memSource) Client() dataplanepb.StorageClient { return m.c }
func (m memSource) CPUs() float64                     { return m.cpus }

// stepClock is a clock that advances step at each reading.
type stepClock struct {
	t    time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time { c.t = c.t.Add(c.step); return c.t }

// TestProbeStorageSpan: the storage probe asks for at least speedSamples
// and keeps asking until storageSpan has passed, then stops: with a clock
// that passes the span quickly it fetches fewer than all the ids, with one
// that never does, every id.
func TestProbeStorageSpan(t *testing.T) {
	var net enginetest.MemNet
	net.Serve(t, "storage:1", enginetest.NewStorage(t, "storage:1"))
	conn, err := grpc.NewClient("passthrough:///storage:1",
		grpc.WithContextDialer(net.Dial), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	src := memSource{c: dataplanepb.NewStorageClient(conn), cpus: 0.5}
	ids := make([]uint64, 32)
	for i := range ids {
		ids[i] = uint64(i)
	}
	for _, tc := range []struct {
		name     string
		step     time.Duration
		min, max int
	}{
		{"span passes", storageSpan / 4, speedSamples, speedSamples + storageWindow + 4},
		{"span never passes", 0, len(ids), len(ids)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &stepClock{t: time.Unix(0, 0), step: tc.step}
			cfg := &Config{Now: clk.now, Pipeline: enginetest.Pipeline(t), PipelineID: enginetest.Pipeline(t).ID(), Seed: 1}
			pr, err := ProbeStorage(context.Background(), cfg, []Source{src}, ids)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(pr.ns); n < tc.min || n > tc.max {
				t.Errorf("probed %d samples, want %d..%d", n, tc.min, tc.max)
			}
			for s, ns := range pr.ns {
				if ns <= 0 || pr.eff[s] < ns {
					t.Errorf("sample %d: cpu %d ns, effective %d ns", s, ns, pr.eff[s])
				}
			}
		})
	}
}

// TestSpeedAgainst: the probe priced against a profile's costs is the
// ratio of the sums of those costs and of the effective CPU (never below
// the thread CPU), over the samples both have; a sample the profile lacks
// or the agents did not answer is left out, and fewer than one leaves 0.
func TestSpeedAgainst(t *testing.T) {
	pr := ProbeOf(2, []uint64{1, 2, 3, 4},
		map[uint64]int64{1: 10, 2: 20, 3: 40},
		map[uint64]int64{1: 20, 2: 15, 3: 40}, nil) // 2: budget under thread CPU; 4: unanswered
	cost := func(id uint64, k int) (float64, bool) {
		if k != 2 {
			t.Fatalf("priced at split %d, want the probe's 2", k)
		}
		return map[uint64]float64{1: 30, 2: 50}[id], id != 3
	}
	speed, rse, n := pr.SpeedAgainst(cost)
	if n != 2 {
		t.Fatalf("compared %d samples, want 2 (3 not in the profile, 4 not answered)", n)
	}
	if want := 80.0 / (20 + 20); math.Abs(speed-want) > 1e-12 {
		t.Errorf("speed %v, want %v: costs over effective CPU, each at least its thread CPU", speed, want)
	}
	if !(rse > 0) {
		t.Errorf("rse %v, want > 0 for two samples of different ratios", rse)
	}
	if s, _, n := ProbeOf(2, nil, nil, nil, nil).SpeedAgainst(cost); s != 0 || n != 0 {
		t.Errorf("empty probe: speed %v over %d samples, want 0 over 0", s, n)
	}
	// Where stage 1 measured the transport, each sample costs its thread
	// CPU times its contention, whatever its effective CPU read (1's
	// throttled 20 does not count); a sample without one keeps its
	// effective CPU.
	pr.contention = map[uint64]float64{1: 1.5}
	speed, _, _ = pr.SpeedAgainst(cost)
	if want := 80.0 / (10*1.5 + 20); math.Abs(speed-want) > 1e-12 {
		t.Errorf("with contention: speed %v, want %v", speed, want)
	}
}
