package ops_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

func gradient(w, h int) *ops.Image {
	img := ops.NewImage(w, h)
	for y := range h {
		for x := range w {
			p := img.Pix[(y*w+x)*3:]
			p[0], p[1], p[2] = uint8(x*7+y), uint8(y*5), uint8(x^y)
		}
	}
	return img
}

func TestResizeOutputSize(t *testing.T) {
	// Expected values follow torchvision's _compute_resized_output_size:
	// the long side is int(256 * long / short), truncated.
	for _, tc := range []struct{ w, h, ww, wh int }{
		{500, 375, 341, 256}, {375, 500, 256, 341}, {256, 256, 256, 256},
		{1024, 683, 383, 256}, {100, 1000, 256, 2560}, {333, 251, 339, 256},
	} {
		w, h := ops.Resize{Short: 256}.OutputSize(tc.w, tc.h)
		if w != tc.ww || h != tc.wh {
			t.Errorf("%dx%d: got %dx%d, want %dx%d", tc.w, tc.h, w, h, tc.ww, tc.wh)
		}
	}
}

func TestCenterCrop(t *testing.T) {
	src := gradient(7, 5)
	at := func(m *ops.Image, x, y int) []byte { return m.Pix[(y*m.W+x)*3 : (y*m.W+x)*3+3] }
	// Cropping 3x2 out of 7x5: top = round(1.5) = 2 (half to even),
	// left = round(2.0) = 2.
	v, err := ops.CenterCrop{H: 2, W: 3}.Apply(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := v.(*ops.Image)
	if got.W != 3 || got.H != 2 || !bytes.Equal(at(got, 0, 0), at(src, 2, 2)) || !bytes.Equal(at(got, 2, 1), at(src, 4, 3)) {
		t.Errorf("crop 3x2 of 7x5 took the wrong pixels")
	}
	// Cropping 10x8 pads: left pad (10-7)/2 = 1, top pad (8-5)/2 = 1.
	v, _ = ops.CenterCrop{H: 8, W: 10}.Apply(src, nil)
	got = v.(*ops.Image)
	if !bytes.Equal(at(got, 0, 0), []byte{0, 0, 0}) || !bytes.Equal(at(got, 1, 1), at(src, 0, 0)) ||
		!bytes.Equal(at(got, 7, 5), at(src, 6, 4)) || !bytes.Equal(at(got, 8, 6), []byte{0, 0, 0}) {
		t.Errorf("padded crop misplaced the image")
	}
}

func TestFlipAndTensor(t *testing.T) {
	src := gradient(5, 3)
	r := ops.NewRand(1)
	always, _ := ops.RandomHorizontalFlip{P: 1}.Apply(src, r)
	never, _ := ops.RandomHorizontalFlip{P: 0}.Apply(src, r)
	f := always.(*ops.Image)
	for y := range 3 {
		for x := range 5 {
			a, b := f.Pix[(y*5+x)*3:(y*5+x)*3+3], src.Pix[(y*5+4-x)*3:(y*5+4-x)*3+3]
			if !bytes.Equal(a, b) {
				t.Fatalf("flip (%d,%d) = %v, want %v", x, y, a, b)
			}
		}
	}
	if !bytes.Equal(never.(*ops.Image).Pix, src.Pix) {
		t.Error("flip with p=0 changed the image")
	}
	tv, _ := ops.ToTensor{}.Apply(src, nil)
	ten := tv.(*ops.Tensor)
	if ten.C != 3 || ten.H != 3 || ten.W != 5 {
		t.Fatalf("tensor dims %dx%dx%d", ten.C, ten.H, ten.W)
	}
	// CHW: channel 1 of pixel (x=2, y=1).
	if got, want := ten.Data[1*15+1*5+2], float32(src.Pix[(1*5+2)*3+1])/255; got != want {
		t.Errorf("tensor[1,1,2] = %v, want %v", got, want)
	}
	n := ops.Normalize{Mean: ops.ImageNetMean, Std: ops.ImageNetStd}
	nv, _ := n.Apply(ten, nil)
	if got, want := nv.(*ops.Tensor).Data[2*15+4], (ten.Data[2*15+4]-ops.ImageNetMean[2])/ops.ImageNetStd[2]; got != want {
		t.Errorf("normalize = %v, want %v", got, want)
	}
	if _, err := n.Apply(src, nil); !errors.Is(err, ops.ErrKind) {
		t.Errorf("normalize of an image: got %v, want ErrKind", err)
	}
}

// TestFusedTensorNormalize checks that the pipeline's fused
// ToTensor+Normalize is bit-identical to the ops run one by one.
func TestFusedTensorNormalize(t *testing.T) {
	p, err := ops.Preset("imagenet-val")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ops.EncodeJPEG(gradient(300, 260), ops.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := ops.Key{Seed: 1, Sample: 3}
	fused, err := p.Run(key, ops.Encoded(raw), 0, p.Len())
	if err != nil {
		t.Fatal(err)
	}
	img, _ := p.Run(key, ops.Encoded(raw), 0, 3)
	ten, _ := p.Run(key, img, 3, 4)
	sep, _ := p.Run(key, ten, 4, 5)
	if !bytes.Equal(valueBytes(fused), valueBytes(sep)) {
		t.Error("fused to_tensor+normalize differs from the separate ops")
	}
}

func TestSampleErrors(t *testing.T) {
	p, _ := ops.Preset("imagenet-train")
	_, err := p.Run(ops.Key{Sample: 77}, ops.Encoded("not a jpeg"), 0, p.Len())
	var se *ops.SampleError
	if !errors.As(err, &se) || se.Sample != 77 || se.Op != "decode" || !errors.Is(err, ops.ErrNotJPEG) {
		t.Errorf("got %v, want a SampleError for sample 77 in decode wrapping ErrNotJPEG", err)
	}
	_, err = p.Run(ops.Key{Sample: 5}, ops.Encoded("x"), 2, p.Len())
	if !errors.As(err, &se) || se.Sample != 5 || !errors.Is(err, ops.ErrKind) {
		t.Errorf("wrong kind at split 2: got %v, want ErrKind for sample 5", err)
	}
	if _, err = p.Run(ops.Key{}, ops.Encoded("x"), 0, 9); !errors.Is(err, ops.ErrSplit) {
		t.Errorf("split 9 of 5: got %v, want ErrSplit", err)
	}
}
