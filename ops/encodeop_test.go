package ops_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/synth"
)

// TestEncodeSpec: encode_jpeg's defaults are Pillow's and torchvision's
// (quality 75, 4:2:0) and are written into the canonical spec; qualities
// outside 1-100, other subsamplings and other ops' fields are refused.
func TestEncodeSpec(t *testing.T) {
	build := func(o ops.OpSpec) (*ops.Pipeline, error) {
		return ops.Spec{Name: "t", Ops: []ops.OpSpec{{Op: "decode"}, o, {Op: "decode"}}}.Build()
	}
	p, err := build(ops.OpSpec{Op: "encode_jpeg"})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Spec().Ops[1]; c.Quality != 75 || c.Subsampling != "4:2:0" {
		t.Errorf("canonical defaults: quality %d, subsampling %q; want 75, 4:2:0", c.Quality, c.Subsampling)
	}
	q, err := build(ops.OpSpec{Op: "encode_jpeg", Quality: 75, Subsampling: "4:2:0"})
	if err != nil || q.ID() != p.ID() {
		t.Errorf("explicit defaults: ID %v (%v), want %s", q, err, p.ID())
	}
	if k := p.KindAt(2); k != ops.KindEncoded {
		t.Errorf("kind after encode_jpeg: %v, want encoded", k)
	}
	for _, bad := range []ops.OpSpec{
		{Op: "encode_jpeg", Quality: 101},
		{Op: "encode_jpeg", Quality: -1},
		{Op: "encode_jpeg", Subsampling: "4:2:2"},
		{Op: "encode_jpeg", Size: []int{224}},
	} {
		if _, err := build(bad); !errors.Is(err, ops.ErrSpec) {
			t.Errorf("%+v: err %v, want ErrSpec", bad, err)
		}
	}
	if _, err := (ops.Spec{Name: "t", Ops: []ops.OpSpec{{Op: "decode"}, {Op: "encode_jpeg"}, {Op: "to_tensor"}}}).Build(); !errors.Is(err, ops.ErrSpec) ||
		!strings.Contains(err.Error(), "takes image but receives encoded") {
		t.Errorf("to_tensor after encode_jpeg: %v, want a kind mismatch", err)
	}
}

// TestCompressedPresets: imagenet-train-q95 and -q90 keep the crop's
// chroma (4:4:4), which on photographs meets 42 and 40 dB where 4:2:0 does
// not (docs/training.md, "Compressed pipelines"); the cgo-free build,
// whose encoder writes only 4:2:0, uses that.
func TestCompressedPresets(t *testing.T) {
	want := "4:4:4"
	if !jpeg.Writes444 {
		want = "4:2:0"
	}
	for name, q := range map[string]int{"imagenet-train-q95": 95, "imagenet-train-q90": 90} {
		p, err := ops.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		c := p.Spec().Ops[3]
		if c.Op != "encode_jpeg" || c.Quality != q || c.Subsampling != want {
			t.Errorf("%s op 3: %+v, want encode_jpeg quality %d subsampling %s", name, c, q, want)
		}
	}
}

// TestEncodeRoundTrip: encode_jpeg then decode gives the image's
// dimensions and pixels close to it (PSNR rising with quality), the same
// bytes every time, and 4:4:4 costs more bytes than 4:2:0.
func TestEncodeRoundTrip(t *testing.T) {
	img := synth.Photo(7, 224, 224)
	var r ops.Rand
	run := func(q, sub int) ([]byte, *ops.Image) {
		t.Helper()
		v, err := ops.Encode{Quality: q, Subsampling: sub}.Apply(img, &r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ops.Encode{Quality: q, Subsampling: sub}.Apply(img, &r)
		if err != nil || !bytes.Equal(again.(ops.Encoded), v.(ops.Encoded)) {
			t.Errorf("q%d %d: a second encode differs (%v)", q, sub, err)
		}
		out, err := ops.Decode{}.Apply(v, &r)
		if err != nil {
			t.Fatal(err)
		}
		m := out.(*ops.Image)
		if m.W != img.W || m.H != img.H {
			t.Fatalf("q%d: decoded %dx%d, want %dx%d", q, m.W, m.H, img.W, img.H)
		}
		return v.(ops.Encoded), m
	}
	prev := 0.0
	for _, q := range []int{50, 90, 95} {
		b, m := run(q, 420)
		p := psnr(img.Pix, m.Pix)
		t.Logf("q%d 4:2:0: %d bytes, PSNR %.1f dB", q, len(b), p)
		if p <= prev || p < 20 {
			t.Errorf("q%d: PSNR %.1f dB, want above %.1f (the lower quality's) and 20", q, p, prev)
		}
		prev = p
	}
	if !jpeg.Writes444 {
		// The cgo-free build's image/jpeg: 4:4:4 is refused, typed.
		if _, err := (ops.Encode{Quality: 95, Subsampling: 444}).Apply(img, &r); !errors.Is(err, ops.ErrUnsupported) {
			t.Errorf("4:4:4 from %s: %v, want ErrUnsupported", ops.JPEGBackend, err)
		}
	} else {
		b420, _ := run(95, 420)
		b444, m444 := run(95, 444)
		if len(b444) <= len(b420) {
			t.Errorf("q95: 4:4:4 %d bytes, 4:2:0 %d: want 4:4:4 larger", len(b444), len(b420))
		}
		if psnr(img.Pix, m444.Pix) <= prev {
			t.Errorf("q95 4:4:4 PSNR %.1f dB, not above 4:2:0's %.1f", psnr(img.Pix, m444.Pix), prev)
		}
	}
	if _, err := (ops.Encode{Quality: 90, Subsampling: 420}).Apply(ops.Encoded{1, 2}, &r); !errors.Is(err, ops.ErrKind) {
		t.Errorf("encoded input: %v, want ErrKind", err)
	}
}

// TestEncodeLimits: the run's limits count an encode_jpeg's output by its
// bound (6 bytes per pixel plus 2 KiB, libjpeg-turbo's worst case at
// 4:4:4) before anything is encoded, and the decode after it by the
// image's dimensions.
func TestEncodeLimits(t *testing.T) {
	p, err := ops.Preset("imagenet-train-q95")
	if err != nil {
		t.Fatal(err)
	}
	data, err := synth.JPEG(3, 200, 150, synth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := ops.Key{Seed: 1, Epoch: 0, Sample: 4}
	const bound = 224*224*6 + 2048
	if _, err := p.RunLimited(key, ops.Encoded(data), 0, 4, ops.Limits{MaxResultBytes: bound}); err != nil {
		t.Errorf("result limit at the bound: %v", err)
	}
	_, err = p.RunLimited(key, ops.Encoded(data), 0, 4, ops.Limits{MaxResultBytes: bound - 1})
	if !errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("result limit under the bound: %v, want ErrTooLarge", err)
	}
	// Every op's output within the bound, the encode's counted at it, the
	// decode after it at 224x224x3 bytes.
	if _, err := p.RunLimited(key, ops.Encoded(data), 0, 5, ops.Limits{MaxOutputBytes: bound}); err != nil {
		t.Errorf("through the second decode: %v", err)
	}
}
