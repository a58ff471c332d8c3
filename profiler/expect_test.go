package profiler

import (
	"math"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

// TestExpect: cuts take the population's bytes per file byte shown in
// their mean region (so two samples of the same file size and image get
// the same cut, whatever their one recorded region gave); compressed sizes
// after the crop move half way to the regression line (exactly on a line
// they stay); sizes before the crop, and the input, do not move.
func TestExpect(t *testing.T) {
	pipe, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	c := &CutAreas{Pipe: pipe, Seed: 2, Image: func(id uint64) (CutImage, bool) {
		return CutImage{W: 640, H: 480}, id != 9
	}}
	mk := func(id uint64, raw, cut int64, comp2 int64) SampleProfile {
		return SampleProfile{ID: id, Raw: raw, CutBytes: cut, Bytes: []int64{raw, 921600, 150528, 150528},
			Compressed: []int64{raw, 800000, comp2, comp2}, OpNS: []int64{1, 1, 1}}
	}
	p := &Profile{CropSplit: 2, Samples: []SampleProfile{
		mk(1, 100_000, 20_000, 100_000),
		mk(2, 100_000, 60_000, 140_000),
		mk(3, 50_000, 10_000, 90_000),
		mk(9, 80_000, 33_333, 120_000), // no image: its cut stays
	}}
	q := c.Expect(p)
	if p.Samples[0].CutBytes != 20_000 || p.Samples[0].Compressed[2] != 100_000 {
		t.Fatal("Expect changed its input")
	}
	if q.Samples[3].CutBytes != 33_333 {
		t.Errorf("a sample without its image: cut %d, want 33333", q.Samples[3].CutBytes)
	}
	// Samples 1 and 2: the same file size and image, so the same
	// expected cut, and the three cuts keep their sum.
	if a, b := q.Samples[0].CutBytes, q.Samples[1].CutBytes; math.Abs(float64(a-b)) > 0.01*float64(a) {
		t.Errorf("equal files, cuts %d and %d", a, b)
	}
	var before, after int64
	for i := range 3 {
		before += p.Samples[i].CutBytes
		after += q.Samples[i].CutBytes
	}
	if math.Abs(float64(after-before)) > 3 {
		t.Errorf("cuts sum to %d, were %d", after, before)
	}
	for i, s := range q.Samples {
		if s.Compressed[1] != 800000 {
			t.Errorf("sample %d: the decoded image's compressed size moved: %d", i, s.Compressed[1])
		}
		if s.Compressed[2] == p.Samples[i].Compressed[2] && i < 2 {
			t.Errorf("sample %d: compressed size after the crop did not move", i)
		}
		if s.Compressed[2] > s.Bytes[2] || s.Compressed[2] != s.Compressed[3] {
			t.Errorf("sample %d: compressed %v of %v", i, s.Compressed, s.Bytes)
		}
	}
	// Samples 1 and 2 share the line's x: each moves half way to the same
	// point, 1 up and 2 down.
	q1, q2 := q.Samples[0].Compressed[2], q.Samples[1].Compressed[2]
	if d := (q1 - 50_000) - (q2 - 70_000); d < -1 || d > 1 || q1 <= 100_000 || q2 >= 140_000 {
		t.Errorf("samples 1 and 2: compressed %d and %d, want half way from 100000 and 140000 to one point", q1, q2)
	}
}

// TestScaleVarying: the cuts and the compressed sizes from the crop split
// on scale, capped at the file and the plain bytes; the rest, and the
// input, do not move.
func TestScaleVarying(t *testing.T) {
	p := &Profile{CropSplit: 2, Samples: []SampleProfile{
		{ID: 1, Raw: 1000, CutBytes: 500, Bytes: []int64{1000, 9000, 3000, 3000}, Compressed: []int64{1000, 7000, 2000, 2950}},
		{ID: 2, Raw: 1000, CutBytes: 990, Bytes: []int64{1000, 9000, 3000, 3000}, Compressed: []int64{1000, 7000, 2000, 2000}},
	}}
	q := p.ScaleVarying(1.1)
	a, b := q.Samples[0], q.Samples[1]
	if a.CutBytes != 550 || b.CutBytes != 1000 {
		t.Errorf("cuts %d and %d, want 550 and 1000 (the file)", a.CutBytes, b.CutBytes)
	}
	if a.Compressed[1] != 7000 || a.Compressed[2] != 2200 || a.Compressed[3] != 3000 {
		t.Errorf("compressed %v, want [1000 7000 2200 3000]", a.Compressed)
	}
	if p.Samples[0].CutBytes != 500 || p.Samples[0].Compressed[2] != 2000 {
		t.Error("ScaleVarying changed its input")
	}
	if p.ScaleVarying(1) != p {
		t.Error("a scale of 1 copied the profile")
	}
}
