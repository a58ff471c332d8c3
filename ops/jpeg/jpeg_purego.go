//go:build !cgo

package jpeg

// The pure-Go backend, used when cgo is off: the standard library's
// image/jpeg. It is slower than libjpeg-turbo and its pixels
// are not byte-identical to libjpeg-turbo's (nor so to Pillow's): it
// upsamples chroma by replication rather than libjpeg's "fancy" triangle
// filter and converts YCbCr with different rounding. It also tolerates some
// corrupt entropy data that libjpeg reports. It cannot write progressive,
// CMYK, 4:2:2 or 4:4:4 JPEGs.

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	stdjpeg "image/jpeg"
	"io"
)

// Backend names the codec in use: "libjpeg-turbo" or "image/jpeg".
const Backend = "image/jpeg"

// Writes444 says whether Encode writes 4:4:4 colour JPEGs: image/jpeg
// writes only 4:2:0.
const Writes444 = false

// goError maps an image/jpeg error to a sentinel-wrapping error.
func goError(err error) error {
	var fe stdjpeg.FormatError
	var ue stdjpeg.UnsupportedError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return wrapf(ErrTruncated, "decode jpeg: image/jpeg: %v", err)
	case errors.As(err, &fe) && string(fe) == "short Huffman data":
		// image/jpeg's name for entropy-coded data cut off by the end of
		// the input.
		return wrapf(ErrTruncated, "decode jpeg: image/jpeg: %v", err)
	case errors.As(err, &ue):
		return wrapf(ErrUnsupported, "decode jpeg: image/jpeg: %v", err)
	case errors.As(err, &fe):
		return wrapf(ErrCorrupt, "decode jpeg: image/jpeg: %v", err)
	}
	return wrapf(ErrCorrupt, "decode jpeg: image/jpeg: %v", err)
}

// decode decodes the whole image (so it always reads and validates the
// whole file, whatever finish says), box-filters it to num/8 and returns
// exactly region. h has passed the limits; region lies inside the scaled
// image.
//
// Of lim it enforces what the caller checked (MaxPixels, the deadline
// before the decode), the pixel buffer's size, counted as the whole image's
// since image/jpeg decodes it all, and MaxScans, by counting the file's SOS
// markers before decoding, and MaxMemory, the caller having counted
// image/jpeg's coefficient buffers (coefMemory). It cannot stop at the
// deadline.
func decode(data []byte, h Header, num int, region Rect, _ bool, lim DecodeLimits) (img *Image, r Rect, err error) {
	if err := lim.checkAlloc(h.W, h.H); err != nil {
		return nil, Rect{}, err
	}
	if lim.MaxScans > 0 && scansOver(data, lim.MaxScans) {
		return nil, Rect{}, wrapf(ErrTooLarge, "decode jpeg: %s JPEG has more than %d scans", scanKind(h.Progressive), lim.MaxScans)
	}
	defer func() {
		if p := recover(); p != nil {
			img, r, err = nil, Rect{}, wrapf(ErrCorrupt, "decode jpeg: image/jpeg panicked: %v", p)
		}
	}()
	src, err := stdjpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, Rect{}, goError(err)
	}
	if b := src.Bounds(); b.Dx() != h.W || b.Dy() != h.H {
		return nil, Rect{}, wrapf(ErrCorrupt, "decode jpeg: image/jpeg decoded %dx%d, header says %dx%d", b.Dx(), b.Dy(), h.W, h.H)
	}
	full := toRGB(src)
	if num == 8 {
		if region == (Rect{W: h.W, H: h.H}) {
			return full, region, nil
		}
		return crop(full, region), region, nil
	}
	return boxScale(full, num, region), region, nil
}

// coefMemory is what image/jpeg allocates for h's whole-image
// coefficient buffers: a [64]int32, 256 bytes, for every block of a
// progressive image (it decodes other multi-scan images without them).
func coefMemory(h Header) int64 {
	if !h.Progressive {
		return 0
	}
	return h.coefBlocks * 256
}

// toRGB converts a decoded image to an RGB Image.
func toRGB(src image.Image) *Image {
	b := src.Bounds()
	dst := newImage(b.Dx(), b.Dy())
	i := 0
	switch m := src.(type) {
	case *image.YCbCr:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				yi, ci := m.YOffset(x, y), m.COffset(x, y)
				dst.Pix[i], dst.Pix[i+1], dst.Pix[i+2] = color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				i += 3
			}
		}
	case *image.Gray:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[(y-b.Min.Y)*m.Stride:]
			for x := range b.Dx() {
				v := row[x]
				dst.Pix[i], dst.Pix[i+1], dst.Pix[i+2] = v, v, v
				i += 3
			}
		}
	case *image.CMYK:
		// image/jpeg has already un-inverted Adobe CMYK into ink amounts.
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[(y-b.Min.Y)*m.Stride:]
			for x := range b.Dx() {
				p := row[4*x : 4*x+4]
				dst.Pix[i], dst.Pix[i+1], dst.Pix[i+2] = cmykToRGB(p[0], p[1], p[2], p[3])
				i += 3
			}
		}
	default:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.RGBAModel.Convert(src.At(x, y)).(color.RGBA)
				dst.Pix[i], dst.Pix[i+1], dst.Pix[i+2] = c.R, c.G, c.B
				i += 3
			}
		}
	}
	return dst
}

// boxScale returns region of src scaled by num/8 to ScaledSize: each output
// pixel is the rounded mean of its box of input pixels, input x in
// [floor(x*W/w), ceil((x+1)*W/w)) and likewise for y.
func boxScale(src *Image, num int, region Rect) *Image {
	sw, sh := ScaledSize(src.W, src.H, num)
	span := func(o, in, out int) (int, int) {
		return o * in / out, min(((o+1)*in+out-1)/out, in)
	}
	dst := newImage(region.W, region.H)
	stride := src.W * channels
	i := 0
	for oy := region.Y; oy < region.Y+region.H; oy++ {
		y0, y1 := span(oy, src.H, sh)
		for ox := region.X; ox < region.X+region.W; ox++ {
			x0, x1 := span(ox, src.W, sw)
			var s0, s1, s2 int
			for y := y0; y < y1; y++ {
				row := src.Pix[y*stride+x0*channels : y*stride+x1*channels]
				for x := 0; x < len(row); x += 3 {
					s0 += int(row[x])
					s1 += int(row[x+1])
					s2 += int(row[x+2])
				}
			}
			n := (y1 - y0) * (x1 - x0)
			dst.Pix[i] = uint8((s0 + n/2) / n)
			dst.Pix[i+1] = uint8((s1 + n/2) / n)
			dst.Pix[i+2] = uint8((s2 + n/2) / n)
			i += 3
		}
	}
	return dst
}

// Encode compresses img with image/jpeg, always as baseline 4:2:0 (or
// grey).
func Encode(img *Image, opt EncodeOptions) ([]byte, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkEncodeImage(img); err != nil {
		return nil, err
	}
	switch {
	case opt.Progressive:
		return nil, wrapf(ErrUnsupported, "encode jpeg: %s cannot write progressive JPEGs", Backend)
	case opt.CMYK:
		return nil, wrapf(ErrUnsupported, "encode jpeg: %s cannot write CMYK JPEGs", Backend)
	case opt.RestartInterval > 0 || opt.Arithmetic || opt.NonInterleaved:
		return nil, wrapf(ErrUnsupported, "encode jpeg: %s writes neither restart markers, arithmetic codes nor non-interleaved scans", Backend)
	case !opt.Gray && (opt.Subsampling != 420 || opt.LumaSampling != [2]int{}):
		return nil, wrapf(ErrUnsupported, "encode jpeg: %s writes only 4:2:0, not %d", Backend, opt.Subsampling)
	}
	var m image.Image
	if opt.Gray {
		g := image.NewGray(image.Rect(0, 0, img.W, img.H))
		for i := range g.Pix {
			p := img.Pix[3*i : 3*i+3]
			// libjpeg's rgb_gray_convert weights, rounded.
			g.Pix[i] = uint8((19595*int(p[0]) + 38470*int(p[1]) + 7471*int(p[2]) + 1<<15) >> 16)
		}
		m = g
	} else {
		rgba := image.NewRGBA(image.Rect(0, 0, img.W, img.H))
		for i := range img.W * img.H {
			copy(rgba.Pix[4*i:4*i+3], img.Pix[3*i:3*i+3])
			rgba.Pix[4*i+3] = 0xFF
		}
		m = rgba
	}
	var buf bytes.Buffer
	if err := stdjpeg.Encode(&buf, m, &stdjpeg.Options{Quality: opt.Quality}); err != nil {
		return nil, fmt.Errorf("%w: encode jpeg: image/jpeg: %v", ErrUnsupported, err)
	}
	return buf.Bytes(), nil
}

// crop copies the pixels of src inside r into a new image.
func crop(src *Image, r Rect) *Image {
	dst := newImage(r.W, r.H)
	sstride, dstride := src.W*channels, dst.W*channels
	for y := 0; y < r.H; y++ {
		copy(dst.Pix[y*dstride:(y+1)*dstride], src.Pix[(r.Y+y)*sstride+r.X*channels:])
	}
	return dst
}
