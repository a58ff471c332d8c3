package ops

// ToTensor converts an image to a float32 CHW tensor scaled to [0, 1]
// (v / 255 in single precision, as torchvision's ToTensor).
type ToTensor struct{}

func (ToTensor) Name() string { return "to_tensor" }
func (ToTensor) In() Kind     { return KindImage }
func (ToTensor) Out() Kind    { return KindTensor }

// Apply implements [Op].
func (o ToTensor) Apply(in Value, _ *Rand) (Value, error) {
	if err := checkKind(o, in); err != nil {
		return nil, err
	}
	var lut [256]float32
	for v := range lut {
		lut[v] = float32(v) / 255
	}
	return toTensorLUT(in.(*Image), [Channels]*[256]float32{&lut, &lut, &lut}), nil
}

func (ToTensor) outShape(in shape) (shape, error) {
	return shape{kind: KindTensor, c: Channels, h: in.h, w: in.w}, nil
}

// Normalize computes (x - Mean[c]) / Std[c] per channel in single
// precision, as torchvision's Normalize.
type Normalize struct {
	Mean, Std [Channels]float32
}

// ImageNetMean and ImageNetStd are the usual ImageNet statistics.
var (
	ImageNetMean = [Channels]float32{0.485, 0.456, 0.406}
	ImageNetStd  = [Channels]float32{0.229, 0.224, 0.225}
)

func (Normalize) Name() string { return "normalize" }
func (Normalize) In() Kind     { return KindTensor }
func (Normalize) Out() Kind    { return KindTensor }

// Apply implements [Op].
func (o Normalize) Apply(in Value, _ *Rand) (Value, error) {
	if err := checkKind(o, in); err != nil {
		return nil, err
	}
	t := in.(*Tensor)
	if t.C != Channels {
		return nil, wrapf(ErrKind, "%s of a %d-channel tensor", o.Name(), t.C)
	}
	out := NewTensor(t.C, t.H, t.W)
	plane := t.H * t.W
	for c := 0; c < t.C; c++ {
		m, s := o.Mean[c], o.Std[c]
		src := t.Data[c*plane : (c+1)*plane]
		dst := out.Data[c*plane : (c+1)*plane]
		for i, x := range src {
			dst[i] = (x - m) / s
		}
	}
	return out, nil
}

func (Normalize) outShape(in shape) (shape, error) { return in, nil }

// lut returns, per channel, the value Normalize gives to ToTensor's output
// for each byte: the fused ToTensor+Normalize below computes exactly the
// same float32 operations in the same order, so it is bit-identical to
// running the two ops one after the other.
func (o Normalize) lut() [Channels]*[256]float32 {
	var luts [Channels]*[256]float32
	for c := range luts {
		l := new([256]float32)
		for v := range l {
			l[v] = (float32(v)/255 - o.Mean[c]) / o.Std[c]
		}
		luts[c] = l
	}
	return luts
}

// toTensorLUT maps every byte of img through its channel's table into a CHW
// tensor.
func toTensorLUT(img *Image, luts [Channels]*[256]float32) *Tensor {
	t := NewTensor(Channels, img.H, img.W)
	plane := img.W * img.H
	r, g, b := t.Data[:plane], t.Data[plane:2*plane], t.Data[2*plane:3*plane]
	lr, lg, lb := luts[0], luts[1], luts[2]
	pix := img.Pix[:plane*Channels]
	for i := range plane {
		p := pix[i*Channels : i*Channels+3]
		r[i], g[i], b[i] = lr[p[0]], lg[p[1]], lb[p[2]]
	}
	return t
}
