package profiler

import (
	"math"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

// TestCutAreasAtEpoch: a cut scaled to an epoch has that epoch's box's
// share of the mean, capped at the file; Normalize undoes it; the epochs'
// factors average to about 1 (the mean is the expectation's estimate).
func TestCutAreasAtEpoch(t *testing.T) {
	pipe, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	dims := map[uint64][2]int{3: {1024, 768}, 8: {640, 480}}
	c := &CutAreas{Pipe: pipe, Seed: 5, Image: func(id uint64) (CutImage, bool) {
		d, ok := dims[id]
		return CutImage{W: d[0], H: d[1]}, ok
	}}
	p := &Profile{Samples: []SampleProfile{
		{ID: 3, Raw: 400_000, CutBytes: 100_000, CutNS: 7, CutFinishNS: 1_000_000, OpNS: []int64{1, 1, 0, 0, 0}},
		{ID: 5, Raw: 90_000, CutBytes: 30_000, CutFinishNS: 500, OpNS: []int64{1, 1, 0, 0, 0}}, // dims unknown
		{ID: 8, Raw: 20_000, CutBytes: 19_000, CutFinishNS: 800, OpNS: []int64{1, 1, 0, 0, 0}},
	}}
	var mean float64
	for e := range uint64(64) {
		q := c.AtEpoch(p, e)
		f := c.Factor(3, e)
		mean += f / 64
		if got, want := q.Samples[0].CutBytes, int64(math.Round(100_000*f)); got != want {
			t.Fatalf("epoch %d: cut %d bytes, want %d (factor %.3f)", e, got, want, f)
		}
		r, err := pipe.CutRegion(1024, 768, ops.Key{Seed: 5, Epoch: e, Sample: 3})
		if err != nil {
			t.Fatal(err)
		}
		im := CutImage{W: 1024, H: 768}
		m, err := MeanCutArea(pipe, im)
		if err != nil {
			t.Fatal(err)
		}
		if want := im.Area(r) / m; math.Abs(f-want) > 1e-12 {
			t.Fatalf("epoch %d: factor %v, want %v", e, f, want)
		}
		if q.Samples[1].CutBytes != 30_000 || q.Samples[1].CutFinishNS != 500 {
			t.Fatalf("a sample of unknown dimensions was scaled: %+v", q.Samples[1])
		}
		if q.Samples[2].CutBytes > 20_000 {
			t.Fatalf("epoch %d: cut of %d bytes above the file's 20000", e, q.Samples[2].CutBytes)
		}
		obs := c.Normalize([]Observation{{ID: 3, Split: ops.SplitCut, Payload: q.Samples[0].CutBytes, LocalNS: q.Samples[0].CutFinishNS}}, p, e)
		if d := math.Abs(float64(obs[0].Payload-100_000)) / 100_000; d > 0.01 {
			t.Fatalf("epoch %d: normalized payload %d, want about 100000", e, obs[0].Payload)
		}
		if d := math.Abs(float64(obs[0].LocalNS-1_000_000)) / 1e6; d > 0.01 {
			t.Fatalf("epoch %d: normalized compute %d ns, want about 1000000", e, obs[0].LocalNS)
		}
	}
	if p.Samples[0].CutBytes != 100_000 {
		t.Fatal("AtEpoch changed its input")
	}
	if mean < 0.8 || mean > 1.25 {
		t.Fatalf("mean factor over 64 epochs %.3f, want about 1", mean)
	}
}
