package jpeg

import (
	"time"

	"github.com/sophon-dl/sophon/internal/bytesize"
)

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
	// MaxBytes, when positive, bounds the pixel buffer the decoder
	// allocates, 3 bytes a pixel: the decoded window in the libjpeg-turbo
	// backend, the whole image in the pure-Go one. A decode that needs more
	// fails with ErrTooLarge before allocating it. Package ops sets it from
	// its Limits.MaxOutputBytes. Zero means no limit.
	MaxBytes int64
}

// DefaultMaxPixels is twice Pillow's MAX_IMAGE_PIXELS: the size at which
// Pillow raises DecompressionBombError rather than warning.
const DefaultMaxPixels = 89478485 * 2

// PixelLimit is the bound l puts on W*H: MaxPixels, or DefaultMaxPixels
// where MaxPixels is not positive.
func (l DecodeLimits) PixelLimit() int {
	if l.MaxPixels <= 0 {
		return DefaultMaxPixels
	}
	return l.MaxPixels
}

// Check refuses, from the header h alone, a file that l does not allow: one
// that declares more than PixelLimit pixels or, when MaxMemory is set, needs
// more coefficient buffers than that (ErrTooLarge), or any file once
// Deadline has passed (ErrDeadline). The decoders apply it first; a caller
// that decides from the header applies it to refuse what they would.
func (l DecodeLimits) Check(h Header) error {
	if limit := l.PixelLimit(); h.W > limit/h.H {
		return wrapf(ErrTooLarge, "%dx%d is %d pixels, limit %d", h.W, h.H, int64(h.W)*int64(h.H), limit)
	}
	if need := coefMemory(h); l.MaxMemory > 0 && need > l.MaxMemory {
		return wrapf(ErrTooLarge, "decode jpeg: %s JPEG of %dx%d needs %s of coefficient buffers, above the %s memory limit",
			scanKind(h.Progressive), h.W, h.H, bytesize.Format(need), bytesize.Format(l.MaxMemory))
	}
	return checkDeadline(l.Deadline, "decode jpeg")
}

// checkAlloc refuses a pixel buffer of w x h RGB pixels above MaxBytes, with
// the words package ops uses for an op's output above its limit.
func (l DecodeLimits) checkAlloc(w, h int) error {
	if l.MaxBytes <= 0 {
		return nil
	}
	if n := int64(w) * int64(h) * channels; n > l.MaxBytes {
		return wrapf(ErrTooLarge, "decode jpeg output %dx%dx%d = %s above the %s limit",
			w, h, channels, bytesize.Format(n), bytesize.Format(l.MaxBytes))
	}
	return nil
}

// checkDeadline fails with ErrDeadline once d (when set) has passed.
func checkDeadline(d time.Time, what string) error {
	if d.IsZero() {
		return nil
	}
	if late := time.Since(d); late >= 0 {
		return wrapf(ErrDeadline, "%s: deadline passed %v ago", what, late.Round(time.Microsecond))
	}
	return nil
}

// scanKind names a multi-scan JPEG in errors: "progressive" or
// "multi-scan".
func scanKind(progressive bool) string {
	if progressive {
		return "progressive"
	}
	return "multi-scan"
}
