// Package resample is Pillow's convolution resampler (libImaging/Resample.c)
// for the bilinear filter on 8-bit RGB images, the kernel of the op
// library's crops and resizes: the same coefficients, the same 22-bit
// fixed-point arithmetic, the same horizontal-then-vertical order with a
// uint8 intermediate. torchvision resizes PIL images with it, so the ops'
// output matches the peer's, not only approximately.
package resample

import (
	"math"
	"sync"
)

// channels is the number of interleaved channels of every Image.
const channels = 3

// Image is an interleaved RGB image, W*H*3 bytes (ops.Image's layout).
type Image struct {
	W, H int
	Pix  []uint8
}

// Rect is a rectangle of an Image (ops.Rect's layout).
type Rect struct {
	X, Y, W, H int
}

// Stride is the number of bytes in one row.
func (m *Image) Stride() int { return m.W * channels }

func newImage(w, h int) *Image {
	return &Image{W: w, H: h, Pix: make([]uint8, w*h*channels)}
}

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

// clip8 is Pillow's clip8: v >> precisionBits clamped to [0, 255]. Like
// Pillow it looks the clamp up in a table, indexed by the top ten bits of v
// as unsigned, so the index is always in range.
func clip8(v int32) uint8 {
	return clip8Table[uint32(v)>>precisionBits]
}

// clip8Table maps the top ten bits of a sum to its clipped byte: 0..255 map
// to themselves, 256..511 (too large) to 255, 512..1023 (negative) to 0.
var clip8Table = func() (t [1 << (32 - precisionBits)]uint8) {
	for i := range t {
		switch {
		case i < 256:
			t[i] = uint8(i)
		case i < len(t)/2:
			t[i] = 255
		}
	}
	return t
}()

// scratch recycles the intermediate image of two-pass resizes.
var scratch = sync.Pool{New: func() any { return new([]uint8) }}

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
		if needV {
			// tmp stays internal: borrow its pixels. resampleH writes
			// every byte, so they need no zeroing.
			n := outW * (yLast - yFirst) * channels
			buf := scratch.Get().(*[]uint8)
			if cap(*buf) < n {
				*buf = make([]uint8, n)
			}
			defer scratch.Put(buf)
			tmp = &Image{W: outW, H: yLast - yFirst, Pix: (*buf)[:n]}
		} else {
			tmp = newImage(outW, yLast-yFirst)
		}
		resampleH(tmp, src, crop.X, crop.Y+yFirst, ch)
		tmpY0 = yFirst
	} else {
		tmp = cropImage(src, crop)
	}
	if !needV {
		return tmp
	}
	out := newImage(tmp.W, outH)
	resampleV(out, tmp, tmpY0, cv)
	return out
}

// resampleH fills every row of dst from src rows y0.. starting at column x0.
func resampleH(dst, src *Image, x0, y0 int, c coeffs) {
	m, start, k := padTaps(c, dst.W)
	sstride := src.Stride()
	dstride := dst.Stride()
	for yy := 0; yy < dst.H; yy++ {
		row := src.Pix[(y0+yy)*sstride+x0*channels:]
		resampleRowRGB(dst.Pix[yy*dstride:(yy+1)*dstride], row, start, k, m)
	}
}

// resampleRowRGB computes one row of the horizontal pass: out pixel i is
// the weights k[i*m:(i+1)*m] applied to the m pixels of row at byte offset
// start[i].
func resampleRowRGB(out, row []uint8, start []int, k []int32, m int) {
	for i, off := range start {
		s0, s1, s2 := dotRGB(row[off:off+m*channels], k[i*m:i*m+m])
		o := out[i*channels : i*channels+channels]
		o[0], o[1], o[2] = clip8(s0), clip8(s1), clip8(s2)
	}
}

// dotRGB returns the rounded fixed-point sums of len(k) RGB pixels of p
// weighted by k. NB: it is not inlined so that its loop has registers for
// the three sums; inlined, they are spilled and every tap waits on memory.
//
//go:noinline
func dotRGB(p []uint8, k []int32) (s0, s1, s2 int32) {
	s0, s1, s2 = 1<<(precisionBits-1), 1<<(precisionBits-1), 1<<(precisionBits-1)
	for j, w := range k {
		q := p[j*channels : j*channels+channels]
		s0 += int32(q[0]) * w
		s1 += int32(q[1]) * w
		s2 += int32(q[2]) * w
	}
	return s0, s1, s2
}

// padTaps gives every one of the outSize outputs of c the same number of
// taps, m, the most any has: start[i] is output i's first input byte offset
// and k[i*m:(i+1)*m] its weights, zero-padded. A zero weight adds nothing,
// so the sums are unchanged; a constant trip count keeps the tap loop's
// exit branch predictable.
func padTaps(c coeffs, outSize int) (m int, start []int, k []int32) {
	inSize := 0
	for i := range outSize {
		m = max(m, int(c.bounds[i*2+1]))
		inSize = max(inSize, int(c.bounds[i*2]+c.bounds[i*2+1]))
	}
	start = make([]int, outSize)
	k = make([]int32, outSize*m)
	for i := range outSize {
		xmin, n := int(c.bounds[i*2]), int(c.bounds[i*2+1])
		// Shift the window left where it would run past the last input
		// that any output reads; the weights move right within it.
		lo := min(xmin, inSize-m)
		start[i] = lo * channels
		copy(k[i*m+xmin-lo:], c.k[i*c.ksize:i*c.ksize+n])
	}
	return m, start, k
}

// resampleV fills dst from src; the coefficient bounds are in rows of the
// original crop and src's first row is row srcY0 of it. src and dst have the
// same width.
func resampleV(dst, src *Image, srcY0 int, c coeffs) {
	ks := c.ksize
	width := dst.Stride()
	var acc []int32
	for yy := 0; yy < dst.H; yy++ {
		ymin := int(c.bounds[yy*2]) - srcY0
		n := int(c.bounds[yy*2+1])
		k := c.k[yy*ks : yy*ks+n]
		// The n input rows are contiguous: src's stride is width.
		rows := src.Pix[ymin*width : (ymin+n)*width]
		out := dst.Pix[yy*width : (yy+1)*width]
		// Taps go four at a time; a short last group is padded with zero
		// weights on row 0, which add nothing. A single group writes out
		// directly, more sum in acc. NB: n >= 1 for any box inside the
		// crop; were it 0, out would keep NewImage's zeros, Pillow's value.
		var t4 taps4
		for g := 0; g < n; g += 4 {
			for t := range 4 {
				t4.w[t], t4.r[t] = 0, rows[:width]
				if g+t < n {
					t4.w[t], t4.r[t] = k[g+t], rows[(g+t)*width:(g+t+1)*width]
				}
			}
			switch first, last := g == 0, g+4 >= n; {
			case first && last:
				t4.store(out)
			case first:
				if acc == nil {
					acc = make([]int32, width)
				}
				t4.init(acc)
			case last:
				t4.finish(out, acc)
			default:
				t4.add(acc)
			}
		}
	}
}

// taps4 is four weighted rows of the vertical pass. Its methods are not
// inlined so that their loops keep every pointer and weight in registers.
type taps4 struct {
	w [4]int32
	r [4][]uint8
}

// store sets out to the rounded, clipped sum of the four rows.
//
//go:noinline
func (t *taps4) store(out []uint8) {
	r0, r1, r2, r3 := t.r[0][:len(out)], t.r[1][:len(out)], t.r[2][:len(out)], t.r[3][:len(out)]
	w0, w1, w2, w3 := t.w[0], t.w[1], t.w[2], t.w[3]
	for i := range out {
		out[i] = clip8(1<<(precisionBits-1) + int32(r0[i])*w0 + int32(r1[i])*w1 + int32(r2[i])*w2 + int32(r3[i])*w3)
	}
}

// init sets acc to the rounding bias plus the sum of the four rows.
//
//go:noinline
func (t *taps4) init(acc []int32) {
	r0, r1, r2, r3 := t.r[0][:len(acc)], t.r[1][:len(acc)], t.r[2][:len(acc)], t.r[3][:len(acc)]
	w0, w1, w2, w3 := t.w[0], t.w[1], t.w[2], t.w[3]
	for i := range acc {
		acc[i] = 1<<(precisionBits-1) + int32(r0[i])*w0 + int32(r1[i])*w1 + int32(r2[i])*w2 + int32(r3[i])*w3
	}
}

// add adds the sum of the four rows to acc.
//
//go:noinline
func (t *taps4) add(acc []int32) {
	r0, r1, r2, r3 := t.r[0][:len(acc)], t.r[1][:len(acc)], t.r[2][:len(acc)], t.r[3][:len(acc)]
	w0, w1, w2, w3 := t.w[0], t.w[1], t.w[2], t.w[3]
	for i := range acc {
		acc[i] += int32(r0[i])*w0 + int32(r1[i])*w1 + int32(r2[i])*w2 + int32(r3[i])*w3
	}
}

// finish sets out to acc plus the sum of the four rows, clipped.
//
//go:noinline
func (t *taps4) finish(out []uint8, acc []int32) {
	acc = acc[:len(out)]
	r0, r1, r2, r3 := t.r[0][:len(out)], t.r[1][:len(out)], t.r[2][:len(out)], t.r[3][:len(out)]
	w0, w1, w2, w3 := t.w[0], t.w[1], t.w[2], t.w[3]
	for i := range out {
		out[i] = clip8(acc[i] + int32(r0[i])*w0 + int32(r1[i])*w1 + int32(r2[i])*w2 + int32(r3[i])*w3)
	}
}

// cropImage copies the pixels of src inside r into a new image.
func cropImage(src *Image, r Rect) *Image {
	dst := newImage(r.W, r.H)
	sstride, dstride := src.Stride(), dst.Stride()
	for y := 0; y < r.H; y++ {
		copy(dst.Pix[y*dstride:(y+1)*dstride], src.Pix[(r.Y+y)*sstride+r.X*channels:])
	}
	return dst
}
