package ops_test

import (
	"fmt"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
)

// benchClasses are the two image classes the op library is measured on.
var benchClasses = []struct {
	name string
	w, h int
}{{"500x375", 500, 375}, {"1600x1200", 1600, 1200}}

// benchImages returns a few photo-like JPEGs of one class.
func benchImages(b *testing.B, w, h int) [][]byte {
	b.Helper()
	var out [][]byte
	for seed := range uint64(4) {
		raw, err := synth.JPEG(100+seed, w, h, synth.Options{})
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, raw)
	}
	return out
}

// benchRun calls f with 0, 1, 2, ... for the benchmark's iterations and
// reports images per second and the size of the last output.
func benchRun(b *testing.B, f func(i int) (ops.Value, error)) {
	i, out := 0, 0
	for b.Loop() {
		v, err := f(i)
		if err != nil {
			b.Fatal(err)
		}
		out = v.Size()
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
	b.ReportMetric(float64(out), "out-bytes")
}

// BenchmarkPipeline runs each preset end to end on one goroutine: ns/op
// is per image, img/s is per core.
func BenchmarkPipeline(b *testing.B) {
	for _, c := range benchClasses {
		imgs := benchImages(b, c.w, c.h)
		for _, name := range ops.PresetNames() {
			p, err := ops.Preset(name)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%s", name, c.name), func(b *testing.B) {
				benchRun(b, func(i int) (ops.Value, error) {
					key := ops.Key{Seed: 1, Epoch: uint64(i / len(imgs)), Sample: uint64(i % len(imgs))}
					return p.Run(key, ops.Encoded(imgs[i%len(imgs)]), 0, p.Len())
				})
			})
		}
	}
}

// BenchmarkOp runs each op of each preset alone on inputs prepared by the
// ops before it: ns/op is the op's cost per image, out-bytes its output.
func BenchmarkOp(b *testing.B) {
	for _, c := range benchClasses {
		imgs := benchImages(b, c.w, c.h)
		for _, name := range ops.PresetNames() {
			p, err := ops.Preset(name)
			if err != nil {
				b.Fatal(err)
			}
			for j := 0; j < p.Len(); j++ {
				ins := make([]ops.Value, len(imgs))
				for s, raw := range imgs {
					key := ops.Key{Seed: 1, Sample: uint64(s)}
					if ins[s], err = p.Run(key, ops.Encoded(raw), 0, j); err != nil {
						b.Fatal(err)
					}
				}
				b.Run(fmt.Sprintf("%s/%s/%d-%s", name, c.name, j, p.Op(j).Name()), func(b *testing.B) {
					benchRun(b, func(i int) (ops.Value, error) {
						s := i % len(ins)
						return p.Run(ops.Key{Seed: 1, Sample: uint64(s)}, ins[s], j, j+1)
					})
				})
			}
		}
	}
}

// BenchmarkDecodeFloor bounds what any pipeline that decodes these JPEGs
// can reach: "full" is a whole decode, "crop" decodes a typical
// RandomResizedCrop box (the central 54% of the area, the mean of scale
// U(0.08, 1)) while still validating the whole file, and "eighth" decodes at
// 1/8 scale, where the IDCT keeps only the DC term: what remains is entropy
// (Huffman) decoding, which no decoder of a baseline JPEG without restart
// markers can skip.
func BenchmarkDecodeFloor(b *testing.B) {
	for _, c := range benchClasses {
		imgs := benchImages(b, c.w, c.h)
		bw, bh := c.w*735/1000, c.h*735/1000
		box := ops.Rect{X: (c.w - bw) / 2, Y: (c.h - bh) / 2, W: bw, H: bh}
		ew, eh := ops.ScaledSize(c.w, c.h, 1)
		for _, tc := range []struct {
			name string
			f    func(raw []byte) error
		}{
			{"full", func(raw []byte) error { _, err := ops.DecodeJPEG(raw, ops.DecodeLimits{}); return err }},
			{"crop", func(raw []byte) error { _, _, err := ops.DecodeJPEGCrop(raw, box, ops.DecodeLimits{}); return err }},
			{"eighth", func(raw []byte) error {
				_, _, err := ops.DecodeJPEGRegion(raw, 1, ops.Rect{W: ew, H: eh}, ops.DecodeLimits{})
				return err
			}},
		} {
			b.Run(c.name+"/"+tc.name, func(b *testing.B) {
				i := 0
				for b.Loop() {
					if err := tc.f(imgs[i%len(imgs)]); err != nil {
						b.Fatal(err)
					}
					i++
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
			})
		}
	}
}
