package main

import (
	"errors"
	"math"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
)

// TestComparePix: identical pixels count maxPSNR; one channel off by 16 in
// 256 values is an MSE of 1, 48.13 dB, with a largest error of 16.
func TestComparePix(t *testing.T) {
	a := make([]uint8, 256)
	for i := range a {
		a[i] = uint8(i)
	}
	if p, e := comparePix(a, a); p != maxPSNR || e != 0 {
		t.Errorf("identical: %.2f dB, max err %d; want %d, 0", p, e, maxPSNR)
	}
	b := append([]uint8(nil), a...)
	b[100] -= 16
	want := 10 * math.Log10(255*255)
	if p, e := comparePix(a, b); math.Abs(p-want) > 1e-9 || e != 16 {
		t.Errorf("one value off by 16: %.4f dB, max err %d; want %.4f, 16", p, e, want)
	}
}

// TestMeasureFidelity runs the compressed presets over a few generated
// photographs: every sample and epoch compared, PSNR rising with quality
// and ordered min <= p5 <= mean, the JPEG far smaller than the uint8
// crop; a pipeline without a round trip is refused.
func TestMeasureFidelity(t *testing.T) {
	var samples [][]byte
	for i := range 4 {
		b, err := synth.JPEG(uint64(20+i), 320+40*i, 240, synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, b)
	}
	samples = append(samples, []byte("not a jpeg"))
	const epochs = 2
	rows := map[string]fidelityRow{}
	for _, name := range []string{"imagenet-train-q95", "imagenet-train-q90"} {
		p, err := ops.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		var failed []int
		row, crops, err := measureFidelity(p, samples, 7, epochs, func(i int, _ error) { failed = append(failed, i) })
		if err != nil {
			t.Fatal(err)
		}
		// One crop per sample and epoch that went through, in order, whose
		// PSNRs and sizes make the row's means.
		if len(crops) != row.Samples {
			t.Fatalf("%s: %d crops listed, the row counts %d", name, len(crops), row.Samples)
		}
		var sumPSNR, sumBytes float64
		for k, c := range crops {
			if c.Sample != k/epochs || c.Epoch != uint64(k%epochs) {
				t.Errorf("%s: crop %d is sample %d epoch %d; want %d, %d", name, k, c.Sample, c.Epoch, k/epochs, k%epochs)
			}
			sumPSNR += c.PSNR
			sumBytes += float64(c.JPEGBytes)
		}
		if n := float64(len(crops)); math.Abs(sumPSNR/n-row.MeanPSNR) > 1e-9 || math.Abs(sumBytes/n-row.MeanJPEGBytes) > 1e-9 {
			t.Errorf("%s: crops' means %.4f dB, %.1f bytes; the row's %.4f, %.1f", name, sumPSNR/n, sumBytes/n, row.MeanPSNR, row.MeanJPEGBytes)
		}
		t.Logf("%s: %+v", name, row)
		if row.Samples != 4*epochs || row.Failed != 1 || len(failed) != 1 || failed[0] != 4 {
			t.Errorf("%s: %d crops, %d failed (%v); want %d, 1 ([4])", name, row.Samples, row.Failed, failed, 4*epochs)
		}
		if !(row.MinPSNR <= row.P5PSNR && row.P5PSNR <= row.MeanPSNR && row.MeanPSNR < maxPSNR && row.MinPSNR > 25) {
			t.Errorf("%s: PSNR min %.2f, p5 %.2f, mean %.2f: want 25 < min <= p5 <= mean < %d", name, row.MinPSNR, row.P5PSNR, row.MeanPSNR, maxPSNR)
		}
		if row.MaxAbsErr < 1 || row.MeanCropBytes != 224*224*3 || row.MeanJPEGBytes <= 0 || row.MeanJPEGBytes > row.MeanCropBytes/3 {
			t.Errorf("%s: max err %d, crop %.0f bytes, JPEG %.0f bytes", name, row.MaxAbsErr, row.MeanCropBytes, row.MeanJPEGBytes)
		}
		rows[name] = row
	}
	q95, q90 := rows["imagenet-train-q95"], rows["imagenet-train-q90"]
	if q95.MeanPSNR <= q90.MeanPSNR || q95.MeanJPEGBytes <= q90.MeanJPEGBytes {
		t.Errorf("q95 %.2f dB, %.0f bytes; q90 %.2f dB, %.0f bytes: want q95 higher in both", q95.MeanPSNR, q95.MeanJPEGBytes, q90.MeanPSNR, q90.MeanJPEGBytes)
	}

	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := measureFidelity(p, samples, 7, 1, func(int, error) {}); !errors.Is(err, errNoRoundTrip) {
		t.Errorf("imagenet-train: %v, want errNoRoundTrip", err)
	}
}
