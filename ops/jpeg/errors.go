package jpeg

import (
	"errors"
	"fmt"
)

// Errors returned by the codec. They are package ops's sentinels, which ops
// re-exports under the same names (ops.ErrCorrupt is ErrCorrupt), so their
// text keeps the "ops:" prefix: callers test them with errors.Is, and the
// agents map them to per-sample error kinds by identity and, in tests and
// logs, by text.
var (
	// ErrEmpty: the input has no bytes.
	ErrEmpty = errors.New("ops: empty input")
	// ErrNotJPEG: the input does not start with a JPEG SOI marker.
	ErrNotJPEG = errors.New("ops: not a jpeg")
	// ErrTruncated: the JPEG ends before its image data is complete.
	ErrTruncated = errors.New("ops: truncated jpeg")
	// ErrCorrupt: the JPEG's headers or entropy-coded data are invalid.
	ErrCorrupt = errors.New("ops: corrupt jpeg")
	// ErrTooLarge: the input or the output would exceed a limit: the
	// declared dimensions, the scans or memory a JPEG needs, or the pixel
	// buffer's bytes (see [DecodeLimits]). Package ops also returns it for
	// an op's output above its limits.
	ErrTooLarge = errors.New("ops: image too large")
	// ErrUnsupported: a valid JPEG the codec does not handle, or a file the
	// encoder cannot write.
	ErrUnsupported = errors.New("ops: unsupported jpeg")
	// ErrDeadline: a decode or a cut under [DecodeLimits] went past its
	// Deadline, before the call or inside libjpeg. Nothing is wrong with the
	// input; a server may retry it with more time.
	ErrDeadline = errors.New("ops: deadline exceeded")
	// ErrSpec: an invalid argument: encode options, an image to encode, a
	// scale, or a region, crop or cut outside the image. It is package ops's
	// error for a bad pipeline spec, hence its text.
	ErrSpec = errors.New("ops: bad pipeline spec")
	// ErrCannotCut: the JPEG cannot be cut losslessly with the exactness the
	// JPEG-domain crop needs (unknown chroma subsampling, an incomplete
	// progressive sequence, data the transform does not read cleanly, a scan
	// or memory limit only the transform would break, a cut no smaller than
	// the file, a build without libturbojpeg). The file may still decode, or
	// fail: the decode decides (see [Cut]).
	ErrCannotCut = errors.New("ops: cannot cut jpeg exactly")
)

// wrapf returns an error that wraps sentinel and adds a formatted detail.
func wrapf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
