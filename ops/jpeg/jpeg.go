// Package jpeg is the op library's JPEG codec: a strict decoder (whole
// image, a region at a DCT scale, or a crop) and an encoder over plain RGB
// pixel buffers ([Image]), a pure-Go header parser ([ReadHeader]) and the
// limits that refuse hostile files from their header ([DecodeLimits]), and
// the lossless JPEG-domain crop ([Cut]). Package ops adapts it to its values
// and ops.
//
// The codec has two backends: jpeg_cgo.go and cut_cgo.go wrap libjpeg-turbo
// (the library Pillow links, so decoded pixels match the peer's byte for
// byte), and jpeg_purego.go falls back on the standard library's image/jpeg
// when cgo is off (slower, its pixels differ from libjpeg-turbo's, and it
// cannot cut). Errors wrap the sentinels of errors.go, which are package
// ops's own (see there).
package jpeg

import "fmt"

// Image is what the codec decodes to and encodes from: 8-bit RGB stored
// row-major, HWC, the pixel at (x, y) occupying
// Pix[(y*W+x)*3 : (y*W+x)*3+3] (the layout of ops.Image).
type Image struct {
	W, H int
	Pix  []uint8
}

// channels is the number of interleaved channels of an [Image].
const channels = 3

func newImage(w, h int) *Image {
	return &Image{W: w, H: h, Pix: make([]uint8, w*h*channels)}
}

// Rect is an integer rectangle: origin (X, Y), extent W x H.
type Rect struct {
	X, Y, W, H int
}

func (r Rect) String() string { return fmt.Sprintf("%dx%d+%d+%d", r.W, r.H, r.X, r.Y) }

// EncodeOptions control Encode.
type EncodeOptions struct {
	// Quality is libjpeg's quality factor, 1..100. Zero means 90.
	Quality int
	// Progressive writes a progressive JPEG (libjpeg's simple progression).
	// The pure-Go build returns a wrapped ErrUnsupported.
	Progressive bool
	// Gray writes a single-component JPEG of the image's luma,
	// Y = 0.299 R + 0.587 G + 0.114 B as libjpeg rounds it.
	Gray bool
	// CMYK writes an Adobe CMYK JPEG (inverted, transform 0, no chroma
	// subsampling) whose decode per Decode's formula approximates the
	// image: K' = max(R, G, B), C' = R*255/K', M' = G*255/K', Y' = B*255/K'
	// (primes denote the stored, inverted values). It exists so tests can
	// make CMYK input. The pure-Go build returns a wrapped ErrUnsupported.
	CMYK bool
	// Subsampling is the chroma subsampling of a colour JPEG: 420, 422 or
	// 444. Zero means 420. The pure-Go build writes only 420.
	Subsampling int

	// The options below make the unusual files that tests and corpora of
	// hostile input need. The pure-Go build writes none of them: it refuses
	// them with a wrapped ErrUnsupported (LumaSampling is ignored for Gray).

	// YCCK makes a CMYK JPEG use Adobe transform 2 (YCCK) instead of plain
	// CMYK.
	YCCK bool
	// LumaSampling, when set, overrides Subsampling with these luma sampling
	// factors over 1x1 chroma (e.g. {4, 2} for 4:1:0). In a CMYK or YCCK
	// JPEG they are the first and the fourth (K) component's.
	LumaSampling [2]int
	// RestartInterval, when positive, writes a restart marker every that
	// many MCUs.
	RestartInterval int
	// Arithmetic writes arithmetic-coded entropy data (SOF9, SOF10 when
	// progressive) instead of Huffman codes.
	Arithmetic bool
	// NonInterleaved writes a sequential JPEG with one scan per component
	// (ignored when Progressive is set).
	NonInterleaved bool
}

// withDefaults validates o and fills in its zero fields.
func (o EncodeOptions) withDefaults() (EncodeOptions, error) {
	if o.Quality == 0 {
		o.Quality = 90
	}
	if o.Quality < 1 || o.Quality > 100 {
		return o, wrapf(ErrSpec, "jpeg quality %d outside 1..100", o.Quality)
	}
	if o.Subsampling == 0 {
		o.Subsampling = 420
	}
	switch o.Subsampling {
	case 420, 422, 444:
	default:
		return o, wrapf(ErrSpec, "jpeg subsampling %d is not 420, 422 or 444", o.Subsampling)
	}
	if o.Gray && o.CMYK {
		return o, wrapf(ErrSpec, "jpeg options Gray and CMYK are exclusive")
	}
	return o, nil
}

// maxDimension is libjpeg's JPEG_MAX_DIMENSION.
const maxDimension = 65500

// checkEncodeImage validates the image given to Encode.
func checkEncodeImage(img *Image) error {
	if img == nil {
		return wrapf(ErrSpec, "encode jpeg: nil image")
	}
	if img.W <= 0 || img.H <= 0 {
		return wrapf(ErrSpec, "encode jpeg: empty image %dx%d", img.W, img.H)
	}
	if img.W > maxDimension || img.H > maxDimension {
		return wrapf(ErrTooLarge, "encode jpeg: %dx%d exceeds %d pixels a side", img.W, img.H, maxDimension)
	}
	if len(img.Pix) != img.W*img.H*channels {
		return wrapf(ErrSpec, "encode jpeg: %dx%d image has %d bytes, want %d", img.W, img.H, len(img.Pix), img.W*img.H*channels)
	}
	return nil
}

// Decode decodes a JPEG to RGB.
//
// Grey is replicated to three channels, as Pillow's convert("RGB") does.
// Four-component JPEGs are read as Adobe (inverted) CMYK, as Pillow reads
// every CMYK JPEG, YCCK being converted to CMYK first. With C, M, Y, K the
// ink amounts in 0..255 (255 minus the stored values), nk = 255 - K and, for
// each of (R, C), (G, M), (B, Y), t = ink*nk + 128, the channel is
// nk - ((t >> 8) + t) >> 8: Pillow's cmyk2rgb, nk*(1 - ink/255) rounded.
//
// The libjpeg-turbo backend decodes with libjpeg's defaults (JDCT_ISLOW,
// fancy upsampling), like Pillow, so its pixels equal Pillow's. It is strict:
// data that ends before the EOI marker gives ErrTruncated, and any libjpeg
// warning about corrupt data (a bad Huffman code, a marker inside entropy
// data, extraneous bytes before a marker) gives ErrCorrupt, where Pillow would
// pad or skip and go on. Data after EOI is ignored.
//
// Every error wraps one of ErrEmpty, ErrNotJPEG, ErrTruncated, ErrCorrupt,
// ErrTooLarge and ErrUnsupported. A frame larger than lim allows is refused
// before any pixel memory is allocated.
func Decode(data []byte, lim DecodeLimits) (*Image, error) {
	h, err := ReadHeader(data)
	if err != nil {
		return nil, err
	}
	if err := lim.Check(h); err != nil {
		return nil, err
	}
	img, _, err := decode(data, h, 8, Rect{W: h.W, H: h.H}, true, lim)
	return img, err
}

// DecodeRegion decodes the image scaled by scaleNum/8 (scaleNum in 1..8),
// but only as much of it as covers region, which is given in the scaled
// image's coordinates and must lie inside it (see ScaledSize). It returns the
// decoded pixels and the rectangle of the scaled image they cover, which
// contains region.
//
// The libjpeg-turbo backend scales in the DCT domain, decodes only the
// columns of region (jpeg_crop_scanline, which widens them leftwards to an
// iMCU boundary, at most 32 columns; where libjpeg-turbo 2.1 crops wrongly,
// for 4:1:0 chroma at scales 2/8 to 7/8, it decodes whole rows), skips the rows above it
// (jpeg_skip_scanlines) and stops after its last row, so only the data it
// reads is validated: a JPEG truncated below the region decodes without
// error. The returned rectangle has region's rows and right edge and starts
// at most 32 columns left of it. Its pixels equal those of the same rectangle
// of a full decode at the same scale, byte for byte.
//
// NB: libjpeg upsamples a cropped window's chroma as though the window's
// edges were the image's, so with horizontally subsampled chroma (4:2:0,
// 4:2:2) at scales where the chroma is not DCT-scaled to full resolution, the
// window's first and last columns would differ from a full decode by a few
// levels. The decoder therefore asks libjpeg for one more column on each side
// and drops the window's outer columns, except where they are the image's own
// edges.
//
// With region the whole scaled image and scaleNum 8 it is exactly Decode.
//
// The pure-Go backend decodes the whole image, averages each output pixel's
// box of input pixels (input x in [floor(x*W/w), ceil((x+1)*W/w)), likewise
// for y, w x h being the scaled size) and returns exactly region.
//
// Errors are as for Decode; a bad scaleNum or region wraps ErrSpec.
func DecodeRegion(data []byte, scaleNum int, region Rect, lim DecodeLimits) (*Image, Rect, error) {
	if scaleNum < 1 || scaleNum > 8 {
		return nil, Rect{}, wrapf(ErrSpec, "jpeg scale %d/8 outside 1/8..8/8", scaleNum)
	}
	h, err := ReadHeader(data)
	if err != nil {
		return nil, Rect{}, err
	}
	if err := lim.Check(h); err != nil {
		return nil, Rect{}, err
	}
	sw, sh := ScaledSize(h.W, h.H, scaleNum)
	if region.W <= 0 || region.H <= 0 || region.X < 0 || region.Y < 0 || region.X > sw-region.W || region.Y > sh-region.H {
		return nil, Rect{}, wrapf(ErrSpec, "jpeg region %v outside the %dx%d image scaled by %d/8", region, sw, sh, scaleNum)
	}
	return decode(data, h, scaleNum, region, false, lim)
}

// DecodeCrop decodes at full scale only the pixels of crop (which must
// lie inside the image) but reads and validates the whole file: the rows
// above and below the crop are entropy-decoded without an IDCT. Its pixels
// equal the same rectangle of Decode's output, byte for byte, and it
// fails exactly where Decode fails, so a pipeline may use it in place of
// a full decode followed by a crop. It returns the pixels and the rectangle
// they cover, which contains crop (see DecodeRegion).
func DecodeCrop(data []byte, crop Rect, lim DecodeLimits) (*Image, Rect, error) {
	h, err := ReadHeader(data)
	if err != nil {
		return nil, Rect{}, err
	}
	if err := lim.Check(h); err != nil {
		return nil, Rect{}, err
	}
	if crop.W <= 0 || crop.H <= 0 || crop.X < 0 || crop.Y < 0 || crop.X > h.W-crop.W || crop.Y > h.H-crop.H {
		return nil, Rect{}, wrapf(ErrSpec, "jpeg crop %v outside the %dx%d image", crop, h.W, h.H)
	}
	return decode(data, h, 8, crop, true, lim)
}

// ScaledSize returns the output size libjpeg gives a w x h image decoded at
// scale scaleNum/8: each side multiplied by scaleNum/8 and rounded up
// (libjpeg's jdiv_round_up).
func ScaledSize(w, h, scaleNum int) (int, int) {
	return (w*scaleNum + 7) / 8, (h*scaleNum + 7) / 8
}

// cmykToRGB is Pillow's cmyk2rgb for one pixel of ink amounts.
func cmykToRGB(c, m, y, k uint8) (uint8, uint8, uint8) {
	nk := 255 - int(k)
	f := func(v uint8) uint8 {
		t := int(v)*nk + 128
		return uint8(nk - (((t >> 8) + t) >> 8))
	}
	return f(c), f(m), f(y)
}
