package computeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
)

func TestParsePlan(t *testing.T) {
	for _, tc := range []struct {
		preset string
		want   map[string]int
	}{
		{"imagenet-train", map[string]int{"nooff": 0, "alloff": 5, "resizeoff": 2}},
		{"imagenet-train-fast", map[string]int{"nooff": 0, "alloff": 4, "resizeoff": 1}},
		{"imagenet-val", map[string]int{"nooff": 0, "alloff": 5, "resizeoff": 3}},
	} {
		p, err := ops.Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		for name, k := range tc.want {
			plan, err := ParsePlan(name, p)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.preset, name, err)
			}
			if got := planSplit(plan, 12345); got != k || plan.Policy != name {
				t.Errorf("%s %s: split %d name %q, want %d", tc.preset, name, got, plan.Policy, k)
			}
		}
	}

	p := enginetest.Pipeline(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.json", `{"pipeline": "`+p.ID()+`", "default": 2, "splits": {"3": 0, "4": 5}}`)
	plan, err := ParsePlan(good, p)
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[uint64]int{0: 2, 3: 0, 4: 5, 99: 2} {
		if got := planSplit(plan, s); got != want {
			t.Errorf("sample %d: split %d, want %d", s, got, want)
		}
	}
	for name, body := range map[string]string{
		"range.json":    `{"default": 0, "splits": {"1": 6}}`,
		"negative.json": `{"default": -2}`,
		"pipe.json":     `{"pipeline": "imagenet-train@000000000000", "default": 0}`,
		"key.json":      `{"default": 0, "splits": {"x": 1}}`,
		"unknown.json":  `{"default": 0, "split": {}}`,
		"syntax.json":   `{"default": `,
	} {
		if _, err := ParsePlan(write(name, body), p); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
	// -1 is the JPEG-domain crop: valid where the pipeline has it.
	if plan, err := ParsePlan(write("cut.json", `{"default": -1}`), p); err != nil || planSplit(plan, 7) != ops.SplitCut {
		t.Errorf("cut plan: %v", err)
	}
	fast, err := ops.Preset("imagenet-train-fast")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePlan(write("cut-fast.json", `{"default": -1}`), fast); !errors.Is(err, ErrConfig) {
		t.Errorf("cut plan for a pipeline without the cut: got %v, want ErrConfig", err)
	}
	if _, err := ParsePlan(filepath.Join(dir, "missing.json"), p); !errors.Is(err, ErrConfig) {
		t.Errorf("missing file: got %v, want ErrConfig", err)
	}
	noCrop, err := ops.Spec{Name: "nocrop", Ops: []ops.OpSpec{{Op: "decode"}, {Op: "to_tensor"}}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ResizeOff(noCrop); !errors.Is(err, ErrConfig) {
		t.Errorf("resizeoff without a crop: got %v, want ErrConfig", err)
	}
}

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

func FuzzDecodePlanFile(f *testing.F) {
	f.Add([]byte(`{"pipeline": "imagenet-train@1f8b59f902fd", "default": 2, "splits": {"3": 0, "4": 5}}`))
	f.Add([]byte(`{"default": -1}`))
	f.Add([]byte(`{"splits": {"18446744073709551615": 1}} {}`))
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pf, err := DecodePlanFile(b, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		if err := checkPlan(pf, p); err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("check error %v does not wrap ErrConfig", err)
			}
			return
		}
		rp := planner.NewRunPlan(pf, nil, policy.Resources{})
		for _, s := range append(slices.Clone(pf.IDs), 1<<63) {
			if k, err := rp.Split(s, p, p.Len()); err != nil || (k < 0 && k != ops.SplitCut) || k > p.Len() {
				t.Fatalf("sample %d: split %d, %v after a passing check", s, k, err)
			}
		}
		if !slices.IsSorted(pf.IDs) || len(slices.Compact(slices.Clone(pf.IDs))) != len(pf.IDs) {
			t.Fatalf("ids %v: not ascending and distinct", pf.IDs)
		}
	})
}

// TestSplitCutAgrees: policy names the JPEG-domain crop with its own
// constant (it does not import ops); the agent passes plans straight
// through, so the two must agree.
func TestSplitCutAgrees(t *testing.T) {
	if policy.SplitCut != ops.SplitCut {
		t.Fatalf("policy.SplitCut %d, ops.SplitCut %d", policy.SplitCut, ops.SplitCut)
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
