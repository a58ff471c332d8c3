package planner

import (
	"errors"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/profiler"
)

// estimateShard is n small generated JPEGs (ids 0..n-1) with the bombs'
// ids replaced by 65535x65535 header bombs, as an EstimateInput whose
// calibration candidates are the first CalibrationSamples+2 files.
func estimateShard(t *testing.T, n int, bombs map[uint64]bool) EstimateInput {
	t.Helper()
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	files := make([][]byte, n)
	sums := make([]jpeg.Summary, n)
	in := EstimateInput{Pipeline: p, Seed: 3, Fingerprint: "fp", RawSizes: make([]uint64, n),
		Raws: map[uint64][]byte{}, Limits: ops.DefaultLimits()}
	for i := range n {
		b := hostile.HeaderBomb(65535, 65535)
		if !bombs[uint64(i)] {
			if b, err = synth.JPEG(uint64(i), 96+8*(i%7), 80+8*(i%5), synth.Options{}); err != nil {
				t.Fatal(err)
			}
		}
		h, err := jpeg.ReadHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		files[i], sums[i], in.RawSizes[i] = b, h.Summary(), uint64(len(b))
		in.Shard = append(in.Shard, uint64(i))
		if i < CalibrationSamples+2 {
			in.Raws[uint64(i)] = b
		}
	}
	in.Header = func(s uint64) (jpeg.Summary, bool) { return sums[s], true }
	return in
}

// TestEstimateRefusesHeaderBombs: a sample whose header the limits refuse
// (a 700-byte file declaring 65535x65535) is not priced: it is left out of
// the estimated profile (a plan sends it raw, where every run fails
// before decoding) and counted, with an error naming it; it is not a
// calibration sample either. The other samples' sizes are those of the
// same shard without the bombs.
func TestEstimateRefusesHeaderBombs(t *testing.T) {
	bombs := map[uint64]bool{2: true, 11: true, 30: true}
	in := estimateShard(t, 40, bombs)
	prof, omitted, err := Estimate(in)
	if err != nil {
		t.Fatal(err)
	}
	if omitted.Refused != len(bombs) || omitted.Unknown != 0 {
		t.Fatalf("omitted %+v, want %d refused, 0 unknown", omitted, len(bombs))
	}
	var se *ops.SampleError
	if !errors.Is(omitted.First, ops.ErrTooLarge) || !errors.As(omitted.First, &se) || !bombs[se.Sample] {
		t.Errorf("first refusal %v, want TOO_LARGE naming a bomb", omitted.First)
	}
	if got, want := len(prof.Samples), 40-len(bombs); got != want {
		t.Fatalf("%d samples in the profile, want %d", got, want)
	}
	clean, _, err := Estimate(estimateShard(t, 40, nil))
	if err != nil {
		t.Fatal(err)
	}
	bytesOf := map[uint64]int64{}
	for _, s := range clean.Samples {
		bytesOf[s.ID] = s.Bytes[1]
	}
	for _, s := range prof.Samples {
		if bombs[s.ID] {
			t.Fatalf("bomb %d is in the profile: %+v", s.ID, s)
		}
		if s.Bytes[1] != bytesOf[s.ID] {
			t.Errorf("sample %d: decode output %d bytes, %d without the bombs", s.ID, s.Bytes[1], bytesOf[s.ID])
		}
	}
	// Every candidate a bomb: the calibration refuses them all, without
	// running them.
	all := estimateShard(t, 4, map[uint64]bool{0: true, 1: true, 2: true, 3: true})
	if _, _, err := Estimate(all); err == nil {
		t.Error("a shard of bombs only: got a profile, want an error")
	}
}

// TestCheapest: the provisional order puts the calibration samples first,
// then every sample by its file's bytes in its cut's region, a sample of
// unknown header by its whole file; no order where nothing can be cut.
func TestCheapest(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	areas := &profiler.CutAreas{Pipe: p, Seed: 3, Image: func(id uint64) (profiler.CutImage, bool) {
		return profiler.CutImageOf(2000, 1500, 16, 16, 3), id != 2
	}}
	sizes := []uint64{1000, 1000, 1000}
	at := Cheapest(areas, sizes, 0, map[uint64]bool{1: true})
	if at(1) != 0 || at(2) != 1000 || !(at(0) > 0 && at(0) < 1000) {
		t.Errorf("calibration %v, unknown header %v, cut %v: want 0, 1000, a share of 1000", at(1), at(2), at(0))
	}
	if Cheapest(nil, sizes, 0, nil) != nil {
		t.Error("no cut areas: want no order")
	}
}
