package estimate_test

import (
	"flag"
	"math"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/profiler"
)

var bias = flag.Bool("bias", false, "run TestEncodedSelectionBias (records 400 images)")

// A JPEG's bytes vary from epoch to epoch with the crop's content, and
// the profile records one draw. A plan that picks the samples to send at
// the split after encode_jpeg by those bytes could pick those whose draw
// was small, and send more in the next epoch than it planned, as it did
// for the cut (profiler.Expect). This measures it: the planned bytes at
// that split against the next epoch's for the same samples, beside how
// much every sample's bytes moved.
func TestEncodedSelectionBias(t *testing.T) {
	if !*bias {
		t.Skip("records 400 images: go test -run TestEncodedSelectionBias -v ./profiler/estimate/ -args -bias")
	}
	p, err := ops.Preset("imagenet-train-q95")
	if err != nil {
		t.Fatal(err)
	}
	const k = 4 // after encode_jpeg
	for _, spec := range []synth.Spec{synth.ImageNetLike, synth.OpenImagesLike} {
		d := generate(t, spec, 100)
		record := func(epoch uint64) *profiler.Profile {
			rec := profiler.NewRecorder(p, "fp", len(d.data))
			for i, raw := range d.data {
				if err := rec.Record(uint64(i), raw, ops.Key{Seed: testSeed, Epoch: epoch, Sample: uint64(i)}); err != nil {
					t.Fatal(err)
				}
			}
			return rec.Profile()
		}
		this, next := record(testEpoch), record(testEpoch+1)
		var all0, all1 float64
		for i := range this.Samples {
			all0 += float64(this.Samples[i].Bytes[k])
			all1 += float64(next.Samples[i].Bytes[k])
		}
		for _, cores := range []float64{32, 1} {
			plan := optimal(this, resources(cores))
			var planned, sent float64
			n := 0
			for i, split := range plan.Split {
				if split == k {
					n++
					planned += float64(this.Samples[i].Bytes[k])
					sent += float64(next.Samples[i].Bytes[k])
				}
			}
			if n == 0 {
				continue
			}
			gap, drift := sent/planned-1, all1/all0-1
			t.Logf("%s, storage %.0f cores: %d samples at split %d, planned %.0f bytes, the next epoch sent %.0f (%+.1f%%); every sample's bytes moved %+.1f%%",
				spec.Name, cores, n, k, planned, sent, 100*gap, 100*drift)
			if math.Abs(gap-drift) > 0.05 {
				t.Errorf("%s, storage %.0f cores: the plan's samples moved %+.1f%%, all %+.1f%%: a selection bias", spec.Name, cores, 100*gap, 100*drift)
			}
		}
	}
}
