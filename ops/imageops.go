package ops

import "math"

// Decode decodes encoded JPEG bytes to an RGB image (libjpeg-turbo under
// cgo, image/jpeg otherwise). Grey images are replicated to three channels,
// as torchvision's PIL loader does with convert("RGB").
type Decode struct {
	// Limits bound the decoded size. Zero fields take their defaults.
	Limits DecodeLimits
}

func (Decode) Name() string { return "decode" }
func (Decode) In() Kind     { return KindEncoded }
func (Decode) Out() Kind    { return KindImage }

// Apply implements [Op].
func (d Decode) Apply(in Value, _ *Rand) (Value, error) {
	if err := checkKind(d, in); err != nil {
		return nil, err
	}
	return DecodeJPEG(in.(Encoded), d.Limits)
}

// outShape is the whole image the frame header declares, which must be
// within the limits.
func (d Decode) outShape(in shape) (shape, error) {
	return decodeShape(in, d.Limits)
}

func decodeShape(in shape, lim DecodeLimits) (shape, error) {
	if in.data == nil && in.w > 0 && in.h > 0 {
		// An encode_jpeg's output, not encoded yet: its dimensions are its
		// image's, within the limits that image was decoded under.
		if err := lim.Check(JPEGHeader{W: in.w, H: in.h, Components: Channels}); err != nil {
			return shape{}, err
		}
		return imageShape(in.w, in.h), nil
	}
	h, err := ReadJPEGHeader(in.data)
	if err != nil {
		return shape{}, err
	}
	if err := lim.Check(h); err != nil {
		return shape{}, err
	}
	return imageShape(h.W, h.H), nil
}

// RandomResizedCrop crops a random box (torchvision's sampler, see
// [SampleRRCBox]) and resizes it to H x W with Pillow's antialiased bilinear
// filter.
type RandomResizedCrop struct {
	H, W   int
	Params RRCParams
}

func (RandomResizedCrop) Name() string { return "random_resized_crop" }
func (RandomResizedCrop) In() Kind     { return KindImage }
func (RandomResizedCrop) Out() Kind    { return KindImage }

// Apply implements [Op].
func (o RandomResizedCrop) Apply(in Value, r *Rand) (Value, error) {
	if err := checkKind(o, in); err != nil {
		return nil, err
	}
	img := in.(*Image)
	if img.W < 1 || img.H < 1 {
		return nil, wrapf(ErrKind, "%s of an empty %dx%d image", o.Name(), img.W, img.H)
	}
	box := SampleRRCBox(img.W, img.H, o.Params, r)
	return Resample(img, box, [4]float32{0, 0, float32(box.W), float32(box.H)}, o.W, o.H), nil
}

func (o RandomResizedCrop) outShape(shape) (shape, error) { return imageShape(o.W, o.H), nil }

// Resize resizes with Pillow's antialiased bilinear filter. With Short set,
// the shorter side becomes Short and the longer keeps the aspect ratio
// (torchvision's Resize(int)); otherwise the output is H x W.
type Resize struct {
	Short int
	H, W  int
}

func (Resize) Name() string { return "resize" }
func (Resize) In() Kind     { return KindImage }
func (Resize) Out() Kind    { return KindImage }

// OutputSize returns the size an input of w x h is resized to, computed as
// torchvision's _compute_resized_output_size does.
func (o Resize) OutputSize(w, h int) (int, int) {
	if o.Short == 0 {
		return o.W, o.H
	}
	short, long := w, h
	if h < w {
		short, long = h, w
	}
	newLong := int(float64(o.Short) * float64(long) / float64(short))
	if w <= h {
		return o.Short, newLong
	}
	return newLong, o.Short
}

// Apply implements [Op].
func (o Resize) Apply(in Value, _ *Rand) (Value, error) {
	if err := checkKind(o, in); err != nil {
		return nil, err
	}
	img := in.(*Image)
	if img.W < 1 || img.H < 1 {
		return nil, wrapf(ErrKind, "%s of an empty %dx%d image", o.Name(), img.W, img.H)
	}
	w, h := o.OutputSize(img.W, img.H)
	if w < 1 || h < 1 {
		return nil, wrapf(ErrTooLarge, "%s of a %dx%d image gives %dx%d", o.Name(), img.W, img.H, w, h)
	}
	whole := Rect{W: img.W, H: img.H}
	return Resample(img, whole, [4]float32{0, 0, float32(img.W), float32(img.H)}, w, h), nil
}

func (o Resize) outShape(in shape) (shape, error) {
	w, h := o.OutputSize(in.w, in.h)
	return imageShape(max(w, 0), max(h, 0)), nil
}

// CenterCrop cuts the central H x W box, padding with zeros when the image
// is smaller, as torchvision's CenterCrop does.
type CenterCrop struct {
	H, W int
}

func (CenterCrop) Name() string { return "center_crop" }
func (CenterCrop) In() Kind     { return KindImage }
func (CenterCrop) Out() Kind    { return KindImage }

// Apply implements [Op].
func (o CenterCrop) Apply(in Value, _ *Rand) (Value, error) {
	if err := checkKind(o, in); err != nil {
		return nil, err
	}
	img := in.(*Image)
	// torchvision first pads (left/top get the floor half), then crops at
	// round((size - crop) / 2) with Python's round half to even.
	padL, padT := 0, 0
	w, h := img.W, img.H
	if o.W > w {
		padL = (o.W - w) / 2
		w = o.W
	}
	if o.H > h {
		padT = (o.H - h) / 2
		h = o.H
	}
	top := int(math.RoundToEven(float64(h-o.H) / 2))
	left := int(math.RoundToEven(float64(w-o.W) / 2))
	return cropPad(img, Rect{X: left - padL, Y: top - padT, W: o.W, H: o.H}), nil
}

func (o CenterCrop) outShape(shape) (shape, error) { return imageShape(o.W, o.H), nil }

// cropPad copies the pixels of src inside r; parts of r outside src are
// zero.
func cropPad(src *Image, r Rect) *Image {
	dst := NewImage(r.W, r.H)
	x0, x1 := max(r.X, 0), min(r.X+r.W, src.W)
	if x1 <= x0 {
		return dst
	}
	for y := max(r.Y, 0); y < min(r.Y+r.H, src.H); y++ {
		d := dst.Pix[((y-r.Y)*r.W+(x0-r.X))*Channels:]
		copy(d[:(x1-x0)*Channels], src.Pix[(y*src.W+x0)*Channels:])
	}
	return dst
}

// RandomHorizontalFlip mirrors the image left-right with probability P.
type RandomHorizontalFlip struct {
	P float64
}

func (RandomHorizontalFlip) Name() string { return "random_horizontal_flip" }
func (RandomHorizontalFlip) In() Kind     { return KindImage }
func (RandomHorizontalFlip) Out() Kind    { return KindImage }

// Apply implements [Op]. It takes exactly one draw whatever the outcome.
func (o RandomHorizontalFlip) Apply(in Value, r *Rand) (Value, error) {
	if err := checkKind(o, in); err != nil {
		return nil, err
	}
	img := in.(*Image)
	if r.Float64() >= o.P {
		return img, nil
	}
	return flipH(img), nil
}

func (RandomHorizontalFlip) outShape(in shape) (shape, error) { return in, nil }

func flipH(src *Image) *Image {
	dst := NewImage(src.W, src.H)
	stride := src.Stride()
	for y := 0; y < src.H; y++ {
		s := src.Pix[y*stride : (y+1)*stride]
		d := dst.Pix[y*stride : (y+1)*stride]
		for x, xr := 0, (src.W-1)*Channels; xr >= 0; x, xr = x+Channels, xr-Channels {
			d[x], d[x+1], d[x+2] = s[xr], s[xr+1], s[xr+2]
		}
	}
	return dst
}
