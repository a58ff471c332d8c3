package ops_test

import (
	"math"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
)

// TestFastPathFidelity compares the fast path's decode-crop-resize with the
// reference decode followed by the same crop and resize, box for box. With
// no DCT scaling the fast path decodes only the crop but must be exact; with
// scaling it approximates the antialiased reference.
func TestFastPathFidelity(t *testing.T) {
	r := ops.NewRand(5)
	worst, exact, scaled := math.Inf(1), 0, 0
	for _, size := range [][2]int{{500, 375}, {1024, 768}, {1600, 1200}, {333, 251}} {
		for seed := range uint64(3) {
			raw, err := synth.JPEG(seed+40, size[0], size[1], synth.Options{})
			if err != nil {
				t.Fatal(err)
			}
			full, err := ops.DecodeJPEG(raw, ops.DecodeLimits{})
			if err != nil {
				t.Fatal(err)
			}
			for range 12 {
				box := ops.SampleRRCBox(full.W, full.H, ops.DefaultRRCParams, r)
				ref := ops.Resample(full, box, [4]float32{0, 0, float32(box.W), float32(box.H)}, 224, 224)
				m := ops.DCTScale(box, 224, 224)
				fast, err := ops.DecodeBoxResized(raw, box, m, 224, 224, ops.DecodeLimits{})
				if err != nil {
					t.Fatal(err)
				}
				p := psnr(ref.Pix, fast.Pix)
				if m == 8 {
					if !math.IsInf(p, 1) {
						t.Errorf("%dx%d box %v at full scale: PSNR %.1f dB, want identical", size[0], size[1], box, p)
					}
					exact++
					continue
				}
				scaled++
				worst = math.Min(worst, p)
				if p < 30 {
					t.Errorf("%dx%d box %v at scale %d/8: PSNR %.1f dB against the reference, want >= 30", size[0], size[1], box, m, p)
				}
			}
		}
	}
	t.Logf("fast path: %d boxes at full scale, all identical to the reference; %d DCT-scaled, worst PSNR %.1f dB", exact, scaled, worst)
	if scaled == 0 || exact == 0 {
		t.Errorf("the boxes did not exercise both paths (%d exact, %d scaled)", exact, scaled)
	}
}
