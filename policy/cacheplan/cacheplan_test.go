package cacheplan

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/profiler"
)

// TestSplitOf: a profile's cache split from its op names is the
// pipeline's own (ops.Pipeline.CacheSplit), for every preset.
func TestSplitOf(t *testing.T) {
	for _, name := range ops.PresetNames() {
		p, err := ops.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, p.Len())
		for j := range names {
			names[j] = p.Op(j).Name()
		}
		if got, want := SplitOf(names), p.CacheSplit(); got != want {
			t.Errorf("%s: SplitOf %v = %d, want %d", name, names, got, want)
		}
	}
}

func TestKnapsack(t *testing.T) {
	for _, c := range []struct {
		name        string
		save, entry []float64
		budget      float64
		take        []float64
		whole       []bool
	}{
		{"by density", []float64{1, 1, 3}, []float64{10, 1, 10}, 11, []float64{0, 1, 1}, []bool{false, true, true}},
		{"fill after fraction", []float64{10, 1, 1}, []float64{10, 2, 5}, 9, []float64{0.9, 0, 0}, []bool{false, true, true}},
		{"no gain", []float64{0, -1, 2}, []float64{1, 1, 1}, 5, []float64{0, 0, 1}, []bool{false, false, true}},
		{"fraction", []float64{1, 3}, []float64{10, 10}, 15, []float64{0.5, 1}, []bool{false, true}},
		{"no budget", []float64{1}, []float64{1}, 0, []float64{0}, []bool{false}},
		{"zero entry", []float64{1}, []float64{0}, 0, []float64{1}, []bool{true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			take := Knapsack(c.save, c.entry, c.budget)
			for i := range take {
				if math.Abs(take[i]-c.take[i]) > 1e-12 {
					t.Fatalf("Knapsack: got %v, want %v", take, c.take)
				}
			}
			if got := Whole(c.save, c.entry, c.budget); !slices.Equal(got, c.whole) {
				t.Errorf("Whole: got %v, want %v", got, c.whole)
			}
		})
	}
}

// TestRewrite: a resident sample costs its finishing and its read at split
// 0 and cannot be sent at any other; the others are untouched.
func TestRewrite(t *testing.T) {
	p := &profiler.Profile{Ops: []string{"decode", "random_resized_crop"}, Samples: []profiler.SampleProfile{
		{ID: 7, Raw: 1000, Bytes: []int64{1000, 9000, 300}, OpNS: []int64{5e6, 1e6}, CutBytes: 400, Compressed: []int64{1, 2, 3}},
		{ID: 8, Raw: 500, Bytes: []int64{500, 9000, 300}, OpNS: []int64{4e6, 1e6}},
	}}
	q := Rewrite(p, []bool{true, false}, 0)
	s := q.Samples[0]
	if s.ID != 7 || s.Bytes[0] != 0 || s.Bytes[1] != Unreachable || s.Bytes[2] != Unreachable || s.HasCut() || s.Compressed != nil {
		t.Errorf("resident sample: %+v", s)
	}
	if got, want := float64(s.OpNS[0]+s.OpNS[1]), FinishNS(&p.Samples[0], 0); got != want || want != 6e6+1000*ReadNSPerByte {
		t.Errorf("resident compute ns %v, FinishNS %v", got, want)
	}
	if p.Samples[0].Bytes[0] != 1000 || !slices.Equal(q.Samples[1].Bytes, p.Samples[1].Bytes) {
		t.Error("Rewrite changed p, or a sample not resident")
	}
	// At the finished output (a deterministic pipeline) only the read is left.
	if d := Rewrite(p, []bool{true, false}, 2).Samples[0]; d.OpNS[0] != 0 || float64(d.OpNS[1]) != 300*ReadNSPerByte {
		t.Errorf("resident at split 2: %+v", d)
	}
}

// TestLRUHitRatio: in random order an LRU cache of a quarter of the
// bytes hits on well under a quarter of the samples: about 3.5%, and
// 8.5% on 300 samples with misses put a window late (the testbed
// measured 27-29 of 300); all of them when it holds the dataset, none
// without a budget; the same inputs give the same ratio, and a dataset
// simulated on a subset gives about the full simulation's.
func TestLRUHitRatio(t *testing.T) {
	uniform := func(n int) []float64 {
		e := make([]float64, n)
		for i := range e {
			e[i] = 100
		}
		return e
	}
	q := LRUHitRatio(2500, uniform(100), 0)
	if q < 0.02 || q > 0.06 {
		t.Errorf("a quarter of the bytes: hit ratio %.3f, want about 0.035 (well under 0.25)", q)
	}
	if lagged := LRUHitRatio(7500, uniform(300), LRULag); lagged < 0.065 || lagged > 0.11 {
		t.Errorf("a quarter of 300 samples, put %d reads late: hit ratio %.3f, want about 0.085", LRULag, lagged)
	}
	if again := LRUHitRatio(2500, uniform(100), 0); again != q {
		t.Errorf("not deterministic: %v then %v", q, again)
	}
	for _, c := range []struct {
		budget float64
		want   float64
	}{{10000, 1}, {20000, 1}, {0, 0}, {50, 0}} {
		if got := LRUHitRatio(c.budget, uniform(100), LRULag); got != c.want {
			t.Errorf("budget %v: hit ratio %v, want %v", c.budget, got, c.want)
		}
	}
	if got := LRUHitRatio(100, nil, 0); got != 0 {
		t.Errorf("no entries: %v", got)
	}
	// Sizes that vary: a subset stands for a larger dataset.
	big := make([]float64, 3*lruSampleMax)
	for i := range big {
		big[i] = float64(50 + i%200)
	}
	quarter := func(e []float64) float64 {
		var total float64
		for _, b := range e {
			total += b
		}
		return total / 4
	}
	full := LRUHitRatio(quarter(big[:lruSampleMax]), big[:lruSampleMax], LRULag)
	sub := LRUHitRatio(quarter(big), big, LRULag)
	if full < 0.02 || full > 0.06 || math.Abs(sub-full) > 0.01 {
		t.Errorf("a quarter of varying sizes: %.3f on %d entries, %.3f on a subset of %d", full, lruSampleMax, sub, len(big))
	}
}

func TestParseBudget(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{{"25%", 250}, {"100%", 1000}, {"0%", 0}, {"4096", 4096}, {"64MiB", 64 << 20}, {"1.5GB", 1.5e9}, {"2g", 2 << 30}, {"2GB", 2e9},
		{"10 KiB", 10240}, {"7b", 7}, {" 12.5 % ", 125}} {
		got, err := ParseBudget(c.in, 1000)
		if err != nil || got != c.want {
			t.Errorf("ParseBudget(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "x", "-1", "101%", "-5%", "NaN", "1e300", "5 parsecs", "%"} {
		if _, err := ParseBudget(in, 1000); !errors.Is(err, ErrBudget) {
			t.Errorf("ParseBudget(%q): %v, want ErrBudget", in, err)
		}
	}
}

// FuzzParseBudget: whatever a user writes, a budget is finite and not
// negative, or the error is ErrBudget.
func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"25%", "64MiB", "1.5GB", "4096", "-1", "1e400", "inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBudget(s, 1e9)
		if err != nil {
			if !errors.Is(err, ErrBudget) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if b < 0 || math.IsNaN(b) || math.IsInf(b, 0) {
			t.Fatalf("%q: budget %v", s, b)
		}
	})
}

// TestPin: a pinned sample keeps its size at the pinned split alone.
func TestPin(t *testing.T) {
	p := &profiler.Profile{Ops: []string{"decode", "random_resized_crop"}, Samples: []profiler.SampleProfile{
		{ID: 7, Raw: 1000, Bytes: []int64{1000, 9000, 300}, OpNS: []int64{5e6, 1e6}, CutBytes: 400},
		{ID: 8, Raw: 500, Bytes: []int64{500, 9000, 300}, OpNS: []int64{4e6, 1e6}},
	}}
	q := Pin(p, []bool{true, false}, 0)
	if s := q.Samples[0]; !slices.Equal(s.Bytes, []int64{1000, Unreachable, Unreachable}) || s.HasCut() || !slices.Equal(s.OpNS, p.Samples[0].OpNS) {
		t.Errorf("pinned sample: %+v", s)
	}
	if !slices.Equal(q.Samples[1].Bytes, p.Samples[1].Bytes) || p.Samples[0].Bytes[1] != 9000 {
		t.Error("Pin changed p, or a sample not pinned")
	}
}

// TestAlternatives: the item taken in part and the best single item, each
// first and then filled by saving per byte.
func TestAlternatives(t *testing.T) {
	save, entry := []float64{1, 1, 30}, []float64{1, 1, 9}
	// Savings per byte 1, 1, 3.3: item 2 first, then item 0 fits, 1 does not.
	if got, want := Whole(save, entry, 10), []bool{true, false, true}; !slices.Equal(got, want) {
		t.Fatalf("Whole: got %v, want %v", got, want)
	}
	save, entry = []float64{2, 2, 9}, []float64{1, 1, 9}
	// Density: 0, 1 (2/B) then 2 (1/B) in part: Whole takes 0 and 1; the
	// alternatives take 2 (the item in part, and the best single) then
	// what fits: nothing.
	if got, want := Whole(save, entry, 9), []bool{true, true, false}; !slices.Equal(got, want) {
		t.Fatalf("Whole: got %v, want %v", got, want)
	}
	alt := Alternatives(save, entry, 9)
	if len(alt) != 2 || !slices.Equal(alt[0], []bool{false, false, true}) || !slices.Equal(alt[1], alt[0]) {
		t.Errorf("Alternatives: got %v, want [[false false true] [false false true]]", alt)
	}
	if alt := Alternatives([]float64{1}, []float64{5}, 4); alt != nil {
		t.Errorf("nothing fits: got %v, want nil", alt)
	}
}
