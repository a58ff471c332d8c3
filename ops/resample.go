package ops

import "github.com/sophon-dl/sophon/ops/internal/resample"

// Resample resizes the part of src inside crop to outW x outH with Pillow's
// bilinear filter, antialiased when shrinking (package ops/internal/resample,
// Pillow's libImaging/Resample.c to the bit). It behaves exactly like
// Pillow's img.crop(crop).resize((outW, outH), BILINEAR, box=box): box is in
// the crop's coordinates and may be fractional; pixels outside crop are never
// read. crop must lie inside src and outW, outH must be positive.
func Resample(src *Image, crop Rect, box [4]float32, outW, outH int) *Image {
	out := resample.Resample(&resample.Image{W: src.W, H: src.H, Pix: src.Pix}, resample.Rect(crop), box, outW, outH)
	return &Image{W: out.W, H: out.H, Pix: out.Pix}
}
