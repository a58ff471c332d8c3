package tensors

import (
	"context"
	"encoding/hex"
	"math"
	"testing"

	"github.com/sophon-dl/sophon/compute-agent/batch"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
)

// fidelityData writes n generated imagenet-like photographs in dir and
// returns the dataset as the storage agent indexes it.
func fidelityData(t *testing.T, dir string, n int) *dataset.Dataset {
	t.Helper()
	if _, err := synth.WriteImageFolder(dir, synth.ImageNetLike, 5, n, 1); err != nil {
		t.Fatal(err)
	}
	d, err := dataset.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// deliveredSHA is the hash the compute agent logs for p's tensor of key.
func deliveredSHA(t *testing.T, d *dataset.Dataset, p *ops.Pipeline, key ops.Key) string {
	t.Helper()
	raw, err := d.Read(key.Sample)
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.Run(key, ops.Encoded(raw), 0, p.Len())
	if err != nil {
		t.Fatal(err)
	}
	sha := batch.RowSHA(v.(*ops.Tensor))
	return hex.EncodeToString(sha[:])
}

// TestFidelityPSNRScale: the PSNR over the tensors, Normalize undone, is
// the PSNR of the decoded crops themselves: the crop before encode_jpeg
// against it after the round trip's decode.
func TestFidelityPSNRScale(t *testing.T) {
	const seed = 3
	data := t.TempDir()
	d := fidelityData(t, data, 1)
	q90, _ := ops.Preset("imagenet-train-q90")
	lossless, _ := ops.Preset("imagenet-train")
	key := ops.Key{Seed: seed, Epoch: 2, Sample: 0}
	f, err := Compare(context.Background(), data, seed, q90, lossless,
		map[[2]uint64]string{{2, 0}: deliveredSHA(t, d, q90, key)})
	if err != nil || f.Samples != 1 || f.Verified != 1 {
		t.Fatalf("%+v, %v", f, err)
	}
	raw, _ := d.Read(0)
	k := LossyAt(q90)
	crop, err := q90.Run(key, ops.Encoded(raw), 0, k)
	if err != nil {
		t.Fatal(err)
	}
	a := crop.(*ops.Image)
	back, err := q90.Run(key, &ops.Image{W: a.W, H: a.H, Pix: append([]uint8(nil), a.Pix...)}, k, k+2)
	if err != nil {
		t.Fatal(err)
	}
	b := back.(*ops.Image)
	var sq float64
	for i := range a.Pix {
		dv := float64(a.Pix[i]) - float64(b.Pix[i])
		sq += dv * dv
	}
	want := psnr(sq / float64(len(a.Pix)))
	if math.Abs(f.PSNRMeanDB-want) > 0.01 || math.Abs(f.PSNRPooledDB-want) > 0.01 {
		t.Errorf("tensor PSNR %.4f dB (pooled %.4f), decoded crops' %.4f dB", f.PSNRMeanDB, f.PSNRPooledDB, want)
	}
	// The crop and flip are the lossless pipeline's own: its tensor is
	// the crop before the round trip.
	t0, err := lossless.Run(key, ops.Encoded(raw), 0, lossless.Len())
	if err != nil {
		t.Fatal(err)
	}
	if tt := t0.(*ops.Tensor); tt.H != a.H || tt.W != a.W {
		t.Errorf("lossless tensor %dx%d, crop %dx%d", tt.W, tt.H, a.W, a.H)
	}
}
