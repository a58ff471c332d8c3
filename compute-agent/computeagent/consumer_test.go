package computeagent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/policy"
)

// perImage is the per-sample step of a rate, as ParseGPU computes it.
func perImage(rate float64) time.Duration { return time.Duration(float64(time.Second) / rate) }

// fakeClock advances only when slept on.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return nil
}

func TestSimConsumer(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		batches int
		size    int
		want    time.Duration
	}{
		{"sim:alexnet-v100", 10, 128, perImage(1150) * 10 * 128},
		{"sim:resnet50-v100", 5, 128, perImage(360) * 5 * 128},
		{"sim:1000", 4, 100, 400 * time.Millisecond},
		{"sim:step=25ms", 8, 128, 200 * time.Millisecond},
		{"sim:step=25ms", 8, 3, 200 * time.Millisecond},
	} {
		clock := &fakeClock{}
		sim, err := ParseGPU(tc.spec, clock)
		if err != nil {
			t.Fatal(err)
		}
		b := &Batch{Samples: make([]uint64, tc.size)}
		for range tc.batches {
			if err := sim.Consume(context.Background(), b); err != nil {
				t.Fatal(err)
			}
		}
		got := clock.Now().Sub(time.Time{})
		if diff := got - tc.want; diff < -time.Millisecond || diff > time.Millisecond {
			t.Errorf("%s: %d batches of %d took %v, want %v", tc.spec, tc.batches, tc.size, got, tc.want)
		}
		rate := float64(tc.batches*tc.size) / got.Seconds()
		t.Logf("%s (%s): %.0f img/s", tc.spec, sim, rate)
	}
	for _, bad := range []string{"", "gpu:0", "sim:", "sim:fast", "sim:-3", "sim:step=x"} {
		if _, err := ParseGPU(bad, nil); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: got %v, want ErrConfig", bad, err)
		}
	}
	// The real clock: a loose bound.
	sim, err := ParseGPU("sim:step=20ms", nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 3 {
		if err := sim.Consume(context.Background(), &Batch{}); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 60*time.Millisecond || d > 2*time.Second {
		t.Errorf("3 steps of 20ms took %v", d)
	}
}

func TestNVMLReportsAbsence(t *testing.T) {
	m := NewNVML(&fakeClock{}, testLogger(t))
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st := m.Sample(ctx)
	t.Logf("gpu: %+v", st)
	if st.Status == "" {
		t.Errorf("empty status")
	}
	if st.Status != "nvml: ok" && st.Devices != 0 {
		t.Errorf("status %q with %d devices", st.Status, st.Devices)
	}
}

// planSplit is plan's split for sample, as the agent runs it.
func planSplit(plan *policy.Plan, sample uint64) int {
	k := plan.Default
	if i, ok := planner.NewRunPlan(plan, nil, policy.Resources{}).Entry(sample); ok {
		k = plan.Split[i]
	}
	return k
}
