package ops

import "math"

// DecodeRandomResizedCrop is the fast path of Decode followed by
// RandomResizedCrop, fused into one op. It reads only the JPEG header, draws
// the crop box with exactly the draws RandomResizedCrop would take (so the
// box is the same), then decodes only the rows and columns the box needs
// and, when the box will be shrunk 2x or more, decodes at a reduced DCT
// scale (libjpeg's scale_num/8) so that far fewer pixels are produced. The
// result is close to, but not byte-identical with, the reference pair; it is
// still deterministic, so split invariance holds for pipelines that use it.
type DecodeRandomResizedCrop struct {
	H, W   int
	Params RRCParams
	Limits DecodeLimits
}

func (DecodeRandomResizedCrop) Name() string { return "decode_random_resized_crop" }
func (DecodeRandomResizedCrop) In() Kind     { return KindEncoded }
func (DecodeRandomResizedCrop) Out() Kind    { return KindImage }

// Apply implements [Op].
func (o DecodeRandomResizedCrop) Apply(in Value, r *Rand) (Value, error) {
	if err := checkKind(o, in); err != nil {
		return nil, err
	}
	data := in.(Encoded)
	hdr, err := ReadJPEGHeader(data)
	if err != nil {
		return nil, err
	}
	if hdr.W < 1 || hdr.H < 1 {
		return nil, wrapf(ErrCorrupt, "header declares %dx%d", hdr.W, hdr.H)
	}
	box := SampleRRCBox(hdr.W, hdr.H, o.Params, r)
	m := dctScale(box, o.W, o.H)
	return decodeBoxResized(data, box, m, o.W, o.H, o.Limits)
}

// outShape checks the header against the limits; the region the op decodes
// depends on its draws, so the decoder checks that buffer itself.
func (o DecodeRandomResizedCrop) outShape(in shape) (shape, error) {
	if _, err := decodeShape(in, o.Limits); err != nil {
		return shape{}, err
	}
	return imageShape(o.W, o.H), nil
}

// dctScale picks the smallest scale m/8 at which the box still has at least
// outW x outH pixels, but only when the box shrinks by 2x or more: smaller
// reductions keep full resolution so quality stays close to the reference.
func dctScale(box Rect, outW, outH int) int {
	if box.W < 2*outW || box.H < 2*outH {
		return 8
	}
	for m := 1; m < 8; m++ {
		if box.W*m >= outW*8 && box.H*m >= outH*8 {
			return m
		}
	}
	return 8
}

// decodeBoxResized decodes box (in full-resolution coordinates) at scale m/8
// and resizes it to outW x outH.
func decodeBoxResized(data []byte, box Rect, m, outW, outH int, lim DecodeLimits) (*Image, error) {
	s := float64(m) / 8
	fx0, fy0 := float64(box.X)*s, float64(box.Y)*s
	fx1, fy1 := float64(box.X+box.W)*s, float64(box.Y+box.H)*s
	x0, y0 := int(math.Floor(fx0)), int(math.Floor(fy0))
	x1, y1 := int(math.Ceil(fx1)), int(math.Ceil(fy1))
	region := Rect{X: x0, Y: y0, W: x1 - x0, H: y1 - y0}
	img, got, err := DecodeJPEGRegion(data, m, region, lim)
	if err != nil {
		return nil, err
	}
	// Clamp to what was decoded: the scaled image can end a pixel short of
	// the scaled box when the dimensions do not divide by 8/m.
	x1, y1 = min(x1, got.X+got.W), min(y1, got.Y+got.H)
	crop := Rect{X: x0 - got.X, Y: y0 - got.Y, W: x1 - x0, H: y1 - y0}
	b := [4]float32{
		float32(fx0 - float64(x0)), float32(fy0 - float64(y0)),
		float32(min(fx1, float64(x1)) - float64(x0)), float32(min(fy1, float64(y1)) - float64(y0)),
	}
	return Resample(img, crop, b, outW, outH), nil
}
