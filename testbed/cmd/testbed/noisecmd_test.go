package main

import (
	"bytes"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/profiler"
)

// noisyProfiles is k profiles of n samples whose costs are a function of
// their sizes and 15% of their own, each timed with 15% noise.
func noisyProfiles(k, n int) []*profiler.Profile {
	rng := rand.New(rand.NewPCG(3, 5))
	type truth struct{ decode, cut float64 }
	ts := make([]truth, n)
	base := &profiler.Profile{Fingerprint: "f", Pipeline: "p", Ops: []string{"decode", "random_resized_crop"}, CropSplit: 2}
	for i := range n {
		raw := int64(50_000 + rng.IntN(400_000))
		px := int64(3 * (200_000 + rng.IntN(2_000_000)))
		cut := raw / int64(2+rng.IntN(6))
		own := 1 + 0.15*rng.NormFloat64()
		ts[i] = truth{(2e5 + 4*float64(raw) + 1.5*float64(px)) * own, (1e5 + 3*float64(raw) + 8*float64(cut)) * own}
		base.Samples = append(base.Samples, profiler.SampleProfile{ID: uint64(i), Raw: raw, Bytes: []int64{raw, px, 150528}, CutBytes: cut})
	}
	var ps []*profiler.Profile
	for range k {
		p := *base
		p.Samples = nil
		for i, s := range base.Samples {
			noisy := func(v float64) int64 { return int64(v * (1 + 0.15*rng.NormFloat64())) }
			s.OpNS = []int64{noisy(ts[i].decode), 60_000}
			s.CutNS, s.CutFinishNS = noisy(ts[i].cut), noisy(ts[i].cut)
			p.Samples = append(p.Samples, s)
		}
		ps = append(ps, &p)
	}
	return ps
}

// TestNoise: on profiles timed with 15% noise the cut's best quarter costs
// over 5% more in another profile than in its own (the winner's curse),
// and within 3% of its planned cost with ExpectCosts; the command reads
// saved profiles, prints both, and refuses one profile or profiles of
// different datasets.
func TestNoise(t *testing.T) {
	ps := noisyProfiles(4, 200)
	planned := make([]*profiler.Profile, len(ps))
	for i, p := range ps {
		planned[i] = profiler.ExpectCosts(p)
	}
	cols := noiseColumns(ps[0])
	if len(cols) != 2 || cols[0].name != "cut" || !strings.HasPrefix(cols[1].name, "split 2") {
		t.Fatalf("columns %v: want the cut and split 2 (split 1 sends more than the file)", cols)
	}
	rec, _, _ := selectionBias(ps, ps, cols[0], 0.25)
	pl, _, _ := selectionBias(ps, planned, cols[0], 0.25)
	if rec < 1.05 || math.Abs(pl-1) > 0.03 {
		t.Errorf("cut's best quarter: bias %.3f recorded, %.3f planned; want over 1.05, then within 3%% of 1", rec, pl)
	}
	if med, _ := spread(ps, cols[0]); med < 0.1 || med > 0.25 {
		t.Errorf("median CV %.3f of costs timed with 15%% noise around 15%% of their own", med)
	}
	dir := t.TempDir()
	var paths []string
	for i, p := range ps[:3] {
		path := filepath.Join(dir, string(rune('a'+i))+".zst")
		if err := profiler.Save(path, p); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	var out bytes.Buffer
	if err := writeNoise(&out, ps[:3]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3 profiles of 200 samples", "cut", "recorded", "planned", "best 25%"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := runNoise(t.Context(), paths, zerolog.Nop()); err != nil {
		t.Errorf("testbed noise %v: %v", paths, err)
	}
	if err := runNoise(t.Context(), paths[:1], zerolog.Nop()); err == nil {
		t.Error("one profile: no error")
	}
	other := *ps[1]
	other.Fingerprint = "g"
	if err := writeNoise(&out, []*profiler.Profile{ps[0], &other}); err == nil || !strings.Contains(err.Error(), "another dataset") {
		t.Errorf("profiles of two datasets: %v", err)
	}
}
