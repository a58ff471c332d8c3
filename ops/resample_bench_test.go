package ops_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

// BenchmarkResample times the RandomResizedCrop resize on a typical box: a
// square crop of about half the image's area, centred, resized to 224x224.
// Bytes are the crop's input bytes.
func BenchmarkResample(b *testing.B) {
	for _, s := range []struct{ w, h int }{{500, 375}, {1600, 1200}} {
		side := int(math.Round(math.Sqrt(0.5 * float64(s.w*s.h))))
		crop := ops.Rect{X: (s.w - side) / 2, Y: (s.h - side) / 2, W: side, H: side}
		b.Run(fmt.Sprintf("%dx%d/%s->224", s.w, s.h, crop), func(b *testing.B) {
			src := syntheticPhoto(s.w, s.h, 1)
			box := [4]float32{0, 0, float32(crop.W), float32(crop.H)}
			b.SetBytes(int64(crop.W * crop.H * ops.Channels))
			b.ReportAllocs()
			for b.Loop() {
				ops.Resample(src, crop, box, 224, 224)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "img/s")
		})
	}
}
