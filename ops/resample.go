package ops

import "math"

// This file reproduces Pillow's convolution resampler (libImaging/Resample.c)
// for the bilinear filter on 8-bit RGB images: the same coefficients, the same
// 22-bit fixed-point arithmetic, the same horizontal-then-vertical order with
// a uint8 intermediate. torchvision resizes PIL images with it, so our output
// matches the peer's, not only approximately.

// precisionBits is Pillow's PRECISION_BITS for 8-bit images.
const precisionBits = 32 - 8 - 2

// bilinearSupport is the bilinear (triangle) filter's support.
const bilinearSupport = 1.0

func bilinearFilter(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return 1 - x
	}
	return 0
}

// coeffs holds, for each output position, the first input index, the number
// of taps and ksize fixed-point weights.
type coeffs struct {
	ksize  int
	bounds []int32 // pairs: min, count
	k      []int32 // outSize * ksize
}

// precomputeCoeffs is Pillow's precompute_coeffs followed by
// normalize_coeffs_8bpc. in0 and in1 are single precision, as in Pillow.
func precomputeCoeffs(inSize int, in0, in1 float32, outSize int) coeffs {
	scale := float64(in1-in0) / float64(outSize)
	filterscale := scale
	if filterscale < 1 {
		filterscale = 1
	}
	support := bilinearSupport * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := coeffs{ksize: ksize, bounds: make([]int32, outSize*2), k: make([]int32, outSize*ksize)}
	kk := make([]float64, ksize)
	ss := 1 / filterscale
	for xx := 0; xx < outSize; xx++ {
		center := float64(in0) + (float64(xx)+0.5)*scale
		xmin := int(center - support + 0.5)
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > inSize {
			xmax = inSize
		}
		xmax -= xmin
		if xmax < 0 {
			xmax = 0
		}
		ww := 0.0
		for x := 0; x < xmax; x++ {
			w := bilinearFilter((float64(x+xmin) - center + 0.5) * ss)
			kk[x] = w
			ww += w
		}
		k := c.k[xx*ksize : (xx+1)*ksize]
		for x := 0; x < xmax; x++ {
			w := kk[x]
			if ww != 0 {
				w /= ww
			}
			if w < 0 {
				k[x] = int32(-0.5 + w*(1<<precisionBits))
			} else {
				k[x] = int32(0.5 + w*(1<<precisionBits))
			}
		}
		c.bounds[xx*2] = int32(xmin)
		c.bounds[xx*2+1] = int32(xmax)
	}
	return c
}

func clip8(v int32) uint8 {
	if v >= 1<<precisionBits<<8 {
		return 255
	}
	if v <= 0 {
		return 0
	}
	return uint8(v >> precisionBits)
}

// Resample resizes the part of src inside crop to outW x outH with Pillow's
// bilinear filter, antialiased when shrinking. It behaves exactly like
// Pillow's img.crop(crop).resize((outW, outH), BILINEAR, box=box): box is in
// the crop's coordinates and may be fractional; pixels outside crop are never
// read. crop must lie inside src and outW, outH must be positive.
func Resample(src *Image, crop Rect, box [4]float32, outW, outH int) *Image {
	needH := outW != crop.W || box[0] != 0 || box[2] != float32(outW)
	needV := outH != crop.H || box[1] != 0 || box[3] != float32(outH)
	ch := precomputeCoeffs(crop.W, box[0], box[2], outW)
	cv := precomputeCoeffs(crop.H, box[1], box[3], outH)

	// Rows of the crop the vertical pass reads.
	yFirst := int(cv.bounds[0])
	yLast := int(cv.bounds[outH*2-2] + cv.bounds[outH*2-1])

	// tmp is the horizontally resampled rows [yFirst, yLast) of the crop, or
	// the crop itself when no horizontal pass is needed.
	var tmp *Image
	tmpY0 := 0
	if needH {
		tmp = NewImage(outW, yLast-yFirst)
		resampleH(tmp, src, crop.X, crop.Y+yFirst, ch)
		tmpY0 = yFirst
	} else {
		tmp = cropImage(src, crop)
	}
	if !needV {
		return tmp
	}
	out := NewImage(tmp.W, outH)
	resampleV(out, tmp, tmpY0, cv)
	return out
}

// resampleH fills every row of dst from src rows y0.. starting at column x0.
func resampleH(dst, src *Image, x0, y0 int, c coeffs) {
	ks := c.ksize
	sstride := src.Stride()
	dstride := dst.Stride()
	for yy := 0; yy < dst.H; yy++ {
		row := src.Pix[(y0+yy)*sstride+x0*Channels:]
		out := dst.Pix[yy*dstride : (yy+1)*dstride]
		for xx := 0; xx < dst.W; xx++ {
			xmin := int(c.bounds[xx*2])
			n := int(c.bounds[xx*2+1])
			k := c.k[xx*ks : xx*ks+n]
			p := row[xmin*Channels : (xmin+n)*Channels]
			var s0, s1, s2 int32 = 1 << (precisionBits - 1), 1 << (precisionBits - 1), 1 << (precisionBits - 1)
			for x, w := range k {
				q := p[x*Channels : x*Channels+3]
				s0 += int32(q[0]) * w
				s1 += int32(q[1]) * w
				s2 += int32(q[2]) * w
			}
			o := out[xx*Channels : xx*Channels+3]
			o[0], o[1], o[2] = clip8(s0), clip8(s1), clip8(s2)
		}
	}
}

// resampleV fills dst from src; the coefficient bounds are in rows of the
// original crop and src's first row is row srcY0 of it.
func resampleV(dst, src *Image, srcY0 int, c coeffs) {
	ks := c.ksize
	stride := src.Stride()
	width := dst.Stride()
	acc := make([]int32, width)
	for yy := 0; yy < dst.H; yy++ {
		ymin := int(c.bounds[yy*2]) - srcY0
		n := int(c.bounds[yy*2+1])
		k := c.k[yy*ks : yy*ks+n]
		for i := range acc {
			acc[i] = 1 << (precisionBits - 1)
		}
		for y, w := range k {
			row := src.Pix[(ymin+y)*stride : (ymin+y)*stride+width]
			for i, v := range row {
				acc[i] += int32(v) * w
			}
		}
		out := dst.Pix[yy*width : (yy+1)*width]
		for i, v := range acc {
			out[i] = clip8(v)
		}
	}
}

// cropImage copies the pixels of src inside r into a new image.
func cropImage(src *Image, r Rect) *Image {
	dst := NewImage(r.W, r.H)
	sstride, dstride := src.Stride(), dst.Stride()
	for y := 0; y < r.H; y++ {
		copy(dst.Pix[y*dstride:(y+1)*dstride], src.Pix[(r.Y+y)*sstride+r.X*Channels:])
	}
	return dst
}
