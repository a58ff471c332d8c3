package planner

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
)

// testPipeline is a five-op training pipeline with a crop op, which can
// cut in the JPEG domain.
func testPipeline(t testing.TB) *ops.Pipeline {
	t.Helper()
	p, err := ops.Spec{Name: "test-train", Ops: []ops.OpSpec{
		{Op: "decode"},
		{Op: "random_resized_crop", Size: []int{24, 24}},
		{Op: "random_horizontal_flip"},
		{Op: "to_tensor"},
		{Op: "normalize", Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}},
	}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

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

	p := testPipeline(t)
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
		if _, err := ParsePlan(write(name, body), p); !errors.Is(err, ErrPlan) {
			t.Errorf("%s: got %v, want ErrPlan", name, err)
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
	if _, err := ParsePlan(write("cut-fast.json", `{"default": -1}`), fast); !errors.Is(err, ErrPlan) {
		t.Errorf("cut plan for a pipeline without the cut: got %v, want ErrPlan", err)
	}
	if _, err := ParsePlan(filepath.Join(dir, "missing.json"), p); !errors.Is(err, ErrPlan) {
		t.Errorf("missing file: got %v, want ErrPlan", err)
	}
	noCrop, err := ops.Spec{Name: "nocrop", Ops: []ops.OpSpec{{Op: "decode"}, {Op: "to_tensor"}}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ResizeOff(noCrop); !errors.Is(err, ErrPlan) {
		t.Errorf("resizeoff without a crop: got %v, want ErrPlan", err)
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
			if !errors.Is(err, ErrPlan) {
				t.Fatalf("error %v does not wrap ErrPlan", err)
			}
			return
		}
		if err := CheckPlan(pf, p); err != nil {
			if !errors.Is(err, ErrPlan) {
				t.Fatalf("check error %v does not wrap ErrPlan", err)
			}
			return
		}
		rp := NewRunPlan(pf, nil, policy.Resources{})
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
	if i, ok := NewRunPlan(plan, nil, policy.Resources{}).Entry(sample); ok {
		k = plan.Split[i]
	}
	return k
}
