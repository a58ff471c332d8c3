package ops

import "time"

// This file holds the JPEG codec's shared API and its pure-Go header parser.
// The codec itself has two backends: jpeg_cgo.go wraps libjpeg-turbo (the
// library Pillow links, so decoded pixels match the peer's byte for byte) and
// jpeg_purego.go falls back on the standard library's image/jpeg when cgo is
// off (slower, and its pixels differ from libjpeg-turbo's).

// JPEGHeader is what the SOF/APP markers declare.
type JPEGHeader struct {
	W, H int
	// Components is 1 (grey), 3 (YCbCr or RGB) or 4 (CMYK or YCCK).
	Components int
	// ColorSpace is "gray", "ycbcr", "rgb", "cmyk" or "ycck", decided from
	// the JFIF and Adobe markers and the component ids exactly as libjpeg's
	// jpeg_read_header does.
	ColorSpace string
	// Progressive is set for SOF2 and SOF10 frames.
	Progressive bool

	// multiScan is set when libjpeg must buffer the whole image's
	// coefficients: a progressive frame, or a first scan that does not
	// hold every component (jdinput.c's has_multiple_scans).
	multiScan bool
	// coefBlocks is the number of 8x8 blocks of all components, each
	// component's rounded up to whole MCUs as libjpeg's coefficient buffer
	// rounds them.
	coefBlocks int64
}

// DecodeLimits bound what a decoder may allocate.
type DecodeLimits struct {
	// MaxPixels bounds W*H as declared by the frame header, whatever the
	// scale of the decode. Zero (or a negative value) means DefaultMaxPixels.
	// NB: beyond the output pixels, a progressive JPEG makes the decoder hold
	// every DCT coefficient, about 2 bytes per sample of every component.
	MaxPixels int
	// MaxScans bounds the scans of a multi-scan (progressive or
	// non-interleaved) JPEG: the decoder fails with ErrTooLarge on reaching
	// scan MaxScans+1, as djpeg -maxscans does. Zero means no limit. The
	// pure-Go backend counts the file's SOS markers before decoding.
	MaxScans int
	// MaxMemory bounds libjpeg's whole-image buffers (max_memory_to_use):
	// the DCT coefficients a multi-scan JPEG makes it hold, 128 bytes per
	// block of every component. A file that needs more fails with
	// ErrTooLarge, from its header, before anything is allocated. Zero
	// means no limit. The pure-Go backend counts its own buffers instead,
	// 256 bytes per block of a progressive image.
	MaxMemory int64
	// Deadline, when set, is checked before the decode and, by libjpeg's
	// progress monitor, during it; past it the decode fails with
	// ErrDeadline. The pure-Go backend checks it only before decoding.
	Deadline time.Time

	// maxBytes, when positive, bounds the pixel buffer the decoder
	// allocates (Limits.MaxOutputBytes).
	maxBytes int64
}

// DefaultMaxPixels is twice Pillow's MAX_IMAGE_PIXELS: the size at which
// Pillow raises DecompressionBombError rather than warning.
const DefaultMaxPixels = 89478485 * 2

func (l DecodeLimits) maxPixels() int {
	if l.MaxPixels <= 0 {
		return DefaultMaxPixels
	}
	return l.MaxPixels
}

// check refuses a header whose declared size exceeds the limits.
func (l DecodeLimits) check(h JPEGHeader) error {
	if limit := l.maxPixels(); h.W > limit/h.H {
		return wrapf(ErrTooLarge, "%dx%d is %d pixels, limit %d", h.W, h.H, int64(h.W)*int64(h.H), limit)
	}
	if need := jpegCoefMemory(h); l.MaxMemory > 0 && need > l.MaxMemory {
		kind := "multi-scan"
		if h.Progressive {
			kind = "progressive"
		}
		return wrapf(ErrTooLarge, "decode jpeg: %s JPEG of %dx%d needs %s of coefficient buffers, above the %s memory limit",
			kind, h.W, h.H, formatBytes(need), formatBytes(l.MaxMemory))
	}
	return checkDeadline(l.Deadline, "decode jpeg")
}

// checkAlloc refuses a pixel buffer of w x h RGB pixels above maxBytes.
func (l DecodeLimits) checkAlloc(w, h int) error {
	return checkOutput("decode jpeg", imageShape(w, h), l.maxBytes)
}

// EncodeOptions control EncodeJPEG.
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
	// subsampling) whose decode per DecodeJPEG's formula approximates the
	// image: K' = max(R, G, B), C' = R*255/K', M' = G*255/K', Y' = B*255/K'
	// (primes denote the stored, inverted values). It exists so tests can
	// make CMYK input. The pure-Go build returns a wrapped ErrUnsupported.
	CMYK bool
	// Subsampling is the chroma subsampling of a colour JPEG: 420, 422 or
	// 444. Zero means 420. The pure-Go build writes only 420.
	Subsampling int

	// ycck makes a CMYK JPEG use Adobe transform 2 (YCCK) instead of plain
	// CMYK; tests use it.
	ycck bool
	// lumaSamp, when set, overrides Subsampling with these luma sampling
	// factors over 1x1 chroma (e.g. {4, 2} for 4:1:0); tests use it. In a
	// CMYK or YCCK JPEG they are the first and the fourth (K) component's.
	lumaSamp [2]int
	// restartInterval, when positive, writes a restart marker every that
	// many MCUs; tests use it.
	restartInterval int
	// arithmetic writes arithmetic-coded entropy data (SOF9, SOF10 when
	// progressive) instead of Huffman codes; tests use it.
	arithmetic bool
	// nonInterleaved writes a sequential JPEG with one scan per component
	// (ignored when Progressive is set); tests use it.
	nonInterleaved bool
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

// jpegMaxDimension is libjpeg's JPEG_MAX_DIMENSION.
const jpegMaxDimension = 65500

// checkJPEGEncodeImage validates the image given to EncodeJPEG.
func checkJPEGEncodeImage(img *Image) error {
	if img == nil {
		return wrapf(ErrSpec, "encode jpeg: nil image")
	}
	if img.W <= 0 || img.H <= 0 {
		return wrapf(ErrSpec, "encode jpeg: empty image %dx%d", img.W, img.H)
	}
	if img.W > jpegMaxDimension || img.H > jpegMaxDimension {
		return wrapf(ErrTooLarge, "encode jpeg: %dx%d exceeds %d pixels a side", img.W, img.H, jpegMaxDimension)
	}
	if len(img.Pix) != img.W*img.H*Channels {
		return wrapf(ErrSpec, "encode jpeg: %dx%d image has %d bytes, want %d", img.W, img.H, len(img.Pix), img.W*img.H*Channels)
	}
	return nil
}

// DecodeJPEG decodes a JPEG to RGB.
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
func DecodeJPEG(data []byte, lim DecodeLimits) (*Image, error) {
	h, err := ReadJPEGHeader(data)
	if err != nil {
		return nil, err
	}
	if err := lim.check(h); err != nil {
		return nil, err
	}
	img, _, err := decodeJPEG(data, h, 8, Rect{W: h.W, H: h.H}, true, lim)
	return img, err
}

// DecodeJPEGRegion decodes the image scaled by scaleNum/8 (scaleNum in 1..8),
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
// With region the whole scaled image and scaleNum 8 it is exactly DecodeJPEG.
//
// The pure-Go backend decodes the whole image, averages each output pixel's
// box of input pixels (input x in [floor(x*W/w), ceil((x+1)*W/w)), likewise
// for y, w x h being the scaled size) and returns exactly region.
//
// Errors are as for DecodeJPEG; a bad scaleNum or region wraps ErrSpec.
func DecodeJPEGRegion(data []byte, scaleNum int, region Rect, lim DecodeLimits) (*Image, Rect, error) {
	if scaleNum < 1 || scaleNum > 8 {
		return nil, Rect{}, wrapf(ErrSpec, "jpeg scale %d/8 outside 1/8..8/8", scaleNum)
	}
	h, err := ReadJPEGHeader(data)
	if err != nil {
		return nil, Rect{}, err
	}
	if err := lim.check(h); err != nil {
		return nil, Rect{}, err
	}
	sw, sh := ScaledSize(h.W, h.H, scaleNum)
	if region.W <= 0 || region.H <= 0 || region.X < 0 || region.Y < 0 || region.X > sw-region.W || region.Y > sh-region.H {
		return nil, Rect{}, wrapf(ErrSpec, "jpeg region %v outside the %dx%d image scaled by %d/8", region, sw, sh, scaleNum)
	}
	return decodeJPEG(data, h, scaleNum, region, false, lim)
}

// DecodeJPEGCrop decodes at full scale only the pixels of crop (which must
// lie inside the image) but reads and validates the whole file: the rows
// above and below the crop are entropy-decoded without an IDCT. Its pixels
// equal the same rectangle of DecodeJPEG's output, byte for byte, and it
// fails exactly where DecodeJPEG fails, so a pipeline may use it in place of
// a full decode followed by a crop. It returns the pixels and the rectangle
// they cover, which contains crop (see DecodeJPEGRegion).
func DecodeJPEGCrop(data []byte, crop Rect, lim DecodeLimits) (*Image, Rect, error) {
	h, err := ReadJPEGHeader(data)
	if err != nil {
		return nil, Rect{}, err
	}
	if err := lim.check(h); err != nil {
		return nil, Rect{}, err
	}
	if crop.W <= 0 || crop.H <= 0 || crop.X < 0 || crop.Y < 0 || crop.X > h.W-crop.W || crop.Y > h.H-crop.H {
		return nil, Rect{}, wrapf(ErrSpec, "jpeg crop %v outside the %dx%d image", crop, h.W, h.H)
	}
	return decodeJPEG(data, h, 8, crop, true, lim)
}

// ScaledSize returns the output size libjpeg gives a w x h image decoded at
// scale scaleNum/8: each side multiplied by scaleNum/8 and rounded up
// (libjpeg's jdiv_round_up).
func ScaledSize(w, h, scaleNum int) (int, int) {
	return (w*scaleNum + 7) / 8, (h*scaleNum + 7) / 8
}

// ReadJPEGHeader parses the markers of a JPEG from SOI up to the first SOS
// (so that APP markers after the frame header count, as in libjpeg) and
// returns what the frame header declares. It is pure Go in both builds and
// allocates nothing in proportion to the image.
//
// It is as strict as the decoder: bytes that are not a marker where one must
// be give ErrCorrupt; data ending before SOS gives ErrTruncated; lossless,
// hierarchical and 12-bit frames, zero height (DNL) and component counts
// other than 1, 3 and 4 give ErrUnsupported.
func ReadJPEGHeader(data []byte) (JPEGHeader, error) {
	var h JPEGHeader
	switch {
	case len(data) == 0:
		return h, ErrEmpty
	case len(data) == 1 && data[0] == 0xFF:
		return h, wrapf(ErrTruncated, "input ends inside the SOI marker")
	case len(data) < 2 || data[0] != 0xFF || data[1] != 0xD8:
		n := min(len(data), 4)
		return h, wrapf(ErrNotJPEG, "input starts % x, want ff d8", data[:n])
	}
	var (
		sawSOF        bool
		jfif, adobe   bool
		adobeXform    byte
		id0, id1, id2 byte
	)
	p := 2
	for {
		if p >= len(data) {
			return h, wrapf(ErrTruncated, "input ends at offset %d, before the SOS marker", p)
		}
		if data[p] != 0xFF {
			return h, wrapf(ErrCorrupt, "byte 0x%02x at offset %d where a marker should start", data[p], p)
		}
		for p < len(data) && data[p] == 0xFF {
			p++ // fill bytes
		}
		if p >= len(data) {
			return h, wrapf(ErrTruncated, "input ends inside a marker at offset %d", p)
		}
		m := data[p]
		p++
		switch {
		case m == 0xD8:
			return h, wrapf(ErrCorrupt, "second SOI marker at offset %d", p-2)
		case m == 0xD9:
			return h, wrapf(ErrCorrupt, "EOI marker at offset %d before any scan", p-2)
		case m == 0x01 || (m >= 0xD0 && m <= 0xD7):
			continue // standalone TEM, RSTn
		case m == 0x00:
			return h, wrapf(ErrCorrupt, "invalid marker 0xff00 at offset %d", p-2)
		}
		if len(data)-p < 2 {
			return h, wrapf(ErrTruncated, "input ends inside the length of marker 0x%02x at offset %d", m, p-2)
		}
		n := int(data[p])<<8 | int(data[p+1])
		if n < 2 {
			return h, wrapf(ErrCorrupt, "marker 0x%02x at offset %d has length %d", m, p-2, n)
		}
		if len(data)-p < n {
			return h, wrapf(ErrTruncated, "input ends inside marker 0x%02x at offset %d (length %d)", m, p-2, n)
		}
		seg := data[p+2 : p+n]
		p += n
		switch {
		case m == 0xDA: // SOS
			if !sawSOF {
				return h, wrapf(ErrCorrupt, "SOS marker before any SOF marker")
			}
			h.ColorSpace = jpegColorSpace(h.Components, jfif, adobe, adobeXform, id0, id1, id2)
			h.multiScan = h.Progressive || (len(seg) > 0 && int(seg[0]) < h.Components)
			return h, nil
		case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC: // SOFn
			if sawSOF {
				return h, wrapf(ErrCorrupt, "second SOF marker 0x%02x", m)
			}
			sawSOF = true
			if err := parseJPEGSOF(&h, m, seg); err != nil {
				return h, err
			}
			id0 = seg[6]
			if h.Components >= 3 {
				id1, id2 = seg[9], seg[12]
			}
		case m == 0xE0: // APP0: libjpeg's examine_app0 needs 14 bytes
			if len(seg) >= 14 && string(seg[:5]) == "JFIF\x00" {
				jfif = true
			}
		case m == 0xEE: // APP14: libjpeg's examine_app14 needs 12 bytes
			if len(seg) >= 12 && string(seg[:5]) == "Adobe" {
				adobe = true
				adobeXform = seg[11]
			}
		}
	}
}

// jpegScansOver reports whether data has more than max SOS markers before
// its EOI (or its end). It walks the marker segments and skips entropy-coded
// data to its next marker without decoding it, in time linear in len(data)
// and with no allocation. Malformed structure ends the count: the decoder
// reports it.
func jpegScansOver(data []byte, max int) bool {
	scans := 0
	p := 2 // after SOI
	for p+1 < len(data) {
		if data[p] != 0xFF {
			return false
		}
		m := data[p+1]
		p += 2
		switch {
		case m == 0xFF:
			p-- // fill byte
			continue
		case m == 0xD9:
			return false
		case m == 0x01 || (m >= 0xD0 && m <= 0xD8):
			continue
		}
		if p+1 >= len(data) {
			return false
		}
		p += int(data[p])<<8 | int(data[p+1])
		if m != 0xDA {
			continue
		}
		if scans++; scans > max {
			return true
		}
		// Entropy-coded data: to the next 0xFF that starts a marker other
		// than RSTn (0xFF00 is a stuffed 0xFF byte).
		for p+1 < len(data) {
			if data[p] == 0xFF {
				if n := data[p+1]; n != 0x00 && (n < 0xD0 || n > 0xD7) {
					break
				}
			}
			p++
		}
	}
	return false
}

// parseJPEGSOF fills h from the payload of SOF marker m.
func parseJPEGSOF(h *JPEGHeader, m byte, seg []byte) error {
	switch m {
	case 0xC3, 0xC5, 0xC6, 0xC7, 0xCB, 0xCD, 0xCE, 0xCF:
		return wrapf(ErrUnsupported, "lossless or hierarchical frame SOF%d", m-0xC0)
	}
	if len(seg) < 6 {
		return wrapf(ErrCorrupt, "SOF%d marker of %d bytes", m-0xC0, len(seg))
	}
	nf := int(seg[5])
	if len(seg) != 6+3*nf {
		return wrapf(ErrCorrupt, "SOF%d marker of %d bytes for %d components", m-0xC0, len(seg), nf)
	}
	if seg[0] != 8 {
		return wrapf(ErrUnsupported, "%d-bit samples", seg[0])
	}
	h.H = int(seg[1])<<8 | int(seg[2])
	h.W = int(seg[3])<<8 | int(seg[4])
	h.Components = nf
	h.Progressive = m == 0xC2 || m == 0xCA
	switch {
	case h.W == 0:
		return wrapf(ErrCorrupt, "frame of width 0")
	case h.H == 0:
		return wrapf(ErrUnsupported, "frame of height 0 (height in a DNL marker)")
	case nf != 1 && nf != 3 && nf != 4:
		return wrapf(ErrUnsupported, "%d colour components", nf)
	}
	hmax, vmax := 1, 1
	for i := range nf {
		hs, vs := int(seg[7+3*i]>>4), int(seg[7+3*i]&15)
		if hs < 1 || hs > 4 || vs < 1 || vs > 4 {
			return wrapf(ErrCorrupt, "component %d has sampling factors %dx%d", i, hs, vs)
		}
		hmax, vmax = max(hmax, hs), max(vmax, vs)
	}
	up := func(a, b int) int { return (a + b - 1) / b }
	for i := range nf {
		hs, vs := int(seg[7+3*i]>>4), int(seg[7+3*i]&15)
		bw, bh := up(h.W*hs, hmax*8), up(h.H*vs, vmax*8)
		h.coefBlocks += int64(up(bw, hs)*hs) * int64(up(bh, vs)*vs)
	}
	return nil
}

// jpegColorSpace is libjpeg's default_decompress_parms guess at the colour
// space of the coded components.
func jpegColorSpace(nf int, jfif, adobe bool, xform, id0, id1, id2 byte) string {
	switch nf {
	case 1:
		return "gray"
	case 3:
		switch {
		case jfif:
			return "ycbcr"
		case adobe:
			if xform == 0 {
				return "rgb"
			}
			return "ycbcr"
		case id0 == 'R' && id1 == 'G' && id2 == 'B':
			return "rgb"
		}
		return "ycbcr"
	default:
		if adobe && xform != 0 {
			return "ycck"
		}
		return "cmyk"
	}
}

// jpegCMYKToRGB is Pillow's cmyk2rgb for one pixel of ink amounts.
func jpegCMYKToRGB(c, m, y, k uint8) (uint8, uint8, uint8) {
	nk := 255 - int(k)
	f := func(v uint8) uint8 {
		t := int(v)*nk + 128
		return uint8(nk - (((t >> 8) + t) >> 8))
	}
	return f(c), f(m), f(y)
}
