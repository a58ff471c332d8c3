package ops

import "github.com/sophon-dl/sophon/ops/jpeg"

// The JPEG codec lives in package jpeg, over plain pixel buffers; this file
// keeps its API under the names ops has always given it and adapts its
// images and rectangles to ops's.

// JPEGHeader is what the SOF/APP markers declare (see [jpeg.Header]).
type JPEGHeader = jpeg.Header

// DecodeLimits bound what a decoder may allocate (see [jpeg.DecodeLimits]).
type DecodeLimits = jpeg.DecodeLimits

// EncodeOptions control EncodeJPEG (see [jpeg.EncodeOptions]).
type EncodeOptions = jpeg.EncodeOptions

// DefaultMaxPixels is twice Pillow's MAX_IMAGE_PIXELS: the size at which
// Pillow raises DecompressionBombError rather than warning.
const DefaultMaxPixels = jpeg.DefaultMaxPixels

// JPEGBackend names the codec in use: "libjpeg-turbo" or "image/jpeg".
const JPEGBackend = jpeg.Backend

// ReadJPEGHeader is [jpeg.ReadHeader].
func ReadJPEGHeader(data []byte) (JPEGHeader, error) { return jpeg.ReadHeader(data) }

// ScaledSize is [jpeg.ScaledSize].
func ScaledSize(w, h, scaleNum int) (int, int) { return jpeg.ScaledSize(w, h, scaleNum) }

// DecodeJPEG is [jpeg.Decode]: it decodes a JPEG to RGB.
func DecodeJPEG(data []byte, lim DecodeLimits) (*Image, error) {
	img, err := jpeg.Decode(data, lim)
	return fromJPEG(img), err
}

// DecodeJPEGRegion is [jpeg.DecodeRegion]: it decodes the part of the image
// scaled by scaleNum/8 that covers region.
func DecodeJPEGRegion(data []byte, scaleNum int, region Rect, lim DecodeLimits) (*Image, Rect, error) {
	img, r, err := jpeg.DecodeRegion(data, scaleNum, jpeg.Rect(region), lim)
	return fromJPEG(img), Rect(r), err
}

// DecodeJPEGCrop is [jpeg.DecodeCrop]: it decodes at full scale only the
// pixels of crop but validates the whole file.
func DecodeJPEGCrop(data []byte, crop Rect, lim DecodeLimits) (*Image, Rect, error) {
	img, r, err := jpeg.DecodeCrop(data, jpeg.Rect(crop), lim)
	return fromJPEG(img), Rect(r), err
}

// EncodeJPEG is [jpeg.Encode].
func EncodeJPEG(img *Image, opt EncodeOptions) ([]byte, error) {
	var m *jpeg.Image
	if img != nil {
		m = &jpeg.Image{W: img.W, H: img.H, Pix: img.Pix}
	}
	return jpeg.Encode(m, opt)
}

// fromJPEG shares the codec's pixels as an Image; nil stays nil.
func fromJPEG(m *jpeg.Image) *Image {
	if m == nil {
		return nil
	}
	return &Image{W: m.W, H: m.H, Pix: m.Pix}
}
