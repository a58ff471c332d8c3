package ops_test

import (
	"errors"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
)

// TestCutRegion: the region a planner predicts from the dimensions alone is
// inside the cut Pipeline.Cut makes (which rounds it out to whole iMCUs),
// for many keys; a pipeline without the cut says so.
func TestCutRegion(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ops.EncodeJPEG(synth.Photo(31, 640, 480), ops.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cuts := 0
	for e := range uint64(40) {
		key := ops.Key{Seed: 5, Epoch: e, Sample: 3}
		r, err := p.CutRegion(640, 480, key)
		if err != nil {
			t.Fatal(err)
		}
		if r.X < 0 || r.Y < 0 || r.W < 1 || r.H < 1 || r.X+r.W > 640 || r.Y+r.H > 480 {
			t.Fatalf("epoch %d: region %v outside the 640x480 image", e, r)
		}
		c, err := p.Cut(key, raw, ops.Limits{})
		if errors.Is(err, ops.ErrCannotCut) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		cuts++
		h, err := ops.ReadJPEGHeader(c.Data)
		if err != nil {
			t.Fatal(err)
		}
		if r.X < c.X || r.Y < c.Y || r.X+r.W > c.X+h.W || r.Y+r.H > c.Y+h.H {
			t.Fatalf("epoch %d: region %v not inside the cut %dx%d+%d+%d", e, r, h.W, h.H, c.X, c.Y)
		}
		if c.X+h.W-(r.X+r.W) >= 16 || r.X-c.X >= 16 {
			t.Fatalf("epoch %d: the cut %dx%d+%d+%d rounds the region %v out by a whole iMCU or more", e, h.W, h.H, c.X, c.Y, r)
		}
	}
	if cuts == 0 && cgoCut() {
		t.Fatal("no key gave a cut")
	}
	val, err := ops.Preset("imagenet-val")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := val.CutRegion(640, 480, ops.Key{}); !errors.Is(err, ops.ErrSplit) {
		t.Fatalf("imagenet-val: %v, want ErrSplit", err)
	}
}
