package jpeg

import (
	"bytes"
	"errors"
	"testing"
)

// TestCut cuts a 4:2:0 JPEG to a rectangle and checks what Cut promises:
// the rectangle it returns covers want, starts on an iMCU boundary and is
// the cut file's size, and the cut's pixels away from its inner edges equal
// the original's. It also checks the refusals.
func TestCut(t *testing.T) {
	data := jpegTestData(t) // 333x251, 4:2:0: iMCU 16x16
	h, err := ReadHeader(data)
	if err != nil {
		t.Fatal(err)
	}
	want := Rect{X: 101, Y: 37, W: 150, H: 120}
	out, got, err := Cut(data, h, want, DecodeLimits{})
	if Backend != "libjpeg-turbo" {
		if !errors.Is(err, ErrCannotCut) {
			t.Fatalf("got %v, want ErrCannotCut from %s", err, Backend)
		}
		return
	}
	if err != nil {
		t.Fatalf("Cut: %v", err)
	}
	if got.X%16 != 0 || got.Y%16 != 0 || got.X > want.X || got.Y > want.Y ||
		got.X+got.W < want.X+want.W || got.Y+got.H < want.Y+want.H {
		t.Fatalf("got %v for want %v, want whole iMCUs covering it", got, want)
	}
	full, err := Decode(data, DecodeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	part, err := Decode(out, DecodeLimits{})
	if err != nil {
		t.Fatalf("decoding the cut: %v", err)
	}
	if part.W != got.W || part.H != got.H {
		t.Fatalf("the cut decodes to %dx%d, want %v", part.W, part.H, got)
	}
	// Chroma upsampling at the cut's inner edges reads samples the cut
	// lacks; a 16-pixel border is well clear of them.
	inner := Rect{X: 16, Y: 16, W: got.W - 32, H: got.H - 32}
	for y := inner.Y; y < inner.Y+inner.H; y++ {
		a := full.Pix[((got.Y+y)*full.W+got.X+inner.X)*channels:][:inner.W*channels]
		b := part.Pix[(y*part.W+inner.X)*channels:][:inner.W*channels]
		if !bytes.Equal(a, b) {
			t.Fatalf("row %d of the cut differs from the original's", y)
		}
	}

	for _, c := range []struct {
		name string
		data []byte
		want Rect
		lim  DecodeLimits
		err  error
	}{
		{"outside", data, Rect{X: 300, Y: 0, W: 40, H: 10}, DecodeLimits{}, ErrSpec},
		{"empty", data, Rect{W: 0, H: 10}, DecodeLimits{}, ErrSpec},
		{"memory", data, want, DecodeLimits{MaxMemory: 1024}, ErrCannotCut},
		{"arithmetic", jpegEncode(t, 64, 48, EncodeOptions{Arithmetic: true}), Rect{W: 16, H: 16}, DecodeLimits{}, ErrCannotCut},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := ReadHeader(c.data)
			if err != nil {
				t.Fatal(err)
			}
			if out, _, err := Cut(c.data, h, c.want, c.lim); out != nil || !errors.Is(err, c.err) {
				t.Fatalf("got %d bytes, %v; want %v", len(out), err, c.err)
			}
		})
	}
}

func jpegEncode(t *testing.T, w, h int, opt EncodeOptions) []byte {
	t.Helper()
	data, err := Encode(jpegTestImage(w, h, 2), opt)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
