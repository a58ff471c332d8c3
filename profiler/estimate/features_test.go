package estimate

import (
	"flag"
	"math"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/profiler"
)

var features = flag.Bool("features", false, "run TestEncodeSizeFeatures (records 240 images)")

// TestEncodeSizeFeatures compares features for the size of
// encode_jpeg's output, each fitted on the first 32 of 120 generated
// images and scored on all: the file's bytes per pixel (the model's)
// against the file's bytes in the area the crop shows.
func TestEncodeSizeFeatures(t *testing.T) {
	if !*features {
		t.Skip("records 240 images: go test -run TestEncodeSizeFeatures -v ./profiler/estimate/ -args -features")
	}
	p, err := ops.Preset("imagenet-train-q95")
	if err != nil {
		t.Fatal(err)
	}
	const n, cal, enc = 120, 32, 3
	for _, spec := range []synth.Spec{synth.ImageNetLike, synth.OpenImagesLike} {
		rec := profiler.NewRecorder(p, "", n)
		var bpp, region, y []float64
		for i := range n {
			raw, err := spec.Generate(5, i)
			if err != nil {
				t.Fatal(err)
			}
			h, err := jpeg.ReadHeader(raw)
			if err != nil {
				t.Fatal(err)
			}
			key := ops.Key{Seed: 11, Epoch: 3, Sample: uint64(i)}
			if err := rec.Record(uint64(i), raw, key); err != nil {
				t.Fatal(err)
			}
			f, err := sampleFeats(p, FromHeader(uint64(i), int64(len(raw)), h), key.Seed, key.Epoch)
			if err != nil {
				t.Fatal(err)
			}
			px := f.ops[enc].size[1]
			bpp, region = append(bpp, f.bpp), append(region, f.ops[enc].detail*px)
		}
		for _, s := range rec.Profile().Samples {
			y = append(y, float64(s.Bytes[enc+1]))
		}
		rms := make([]float64, 2)
		for j, c := range []struct {
			name string
			x    []float64
		}{{"bytes per pixel of the file", bpp}, {"bytes of the file in the area shown", region}} {
			l := fit(y[:cal], c.x[:cal])
			var se, got, want float64
			for i := range y {
				e := l.at(c.x[i])
				se += (e - y[i]) * (e - y[i]) / (y[i] * y[i])
				got, want = got+e, want+y[i]
			}
			rms[j] = math.Sqrt(se / n)
			t.Logf("%s, %s: %.0f%% rms per sample, %+.1f%% in sum", spec.Name, c.name, 100*rms[j], 100*(got/want-1))
		}
		if rms[0] >= rms[1] {
			t.Errorf("%s: the model's feature is %.0f%% rms per sample, the area's %.0f%%", spec.Name, 100*rms[0], 100*rms[1])
		}
	}
}
