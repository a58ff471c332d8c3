package ops

import (
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/ops/jpeg"
)

// Errors returned by the op library. Callers test them with errors.Is; the
// agents map them to per-sample error kinds. The JPEG errors and ErrSpec are
// package jpeg's, under the same names: the codec returns them, and so does
// ops.
var (
	// ErrEmpty: the input has no bytes.
	ErrEmpty = jpeg.ErrEmpty
	// ErrNotJPEG: the input does not start with a JPEG SOI marker.
	ErrNotJPEG = jpeg.ErrNotJPEG
	// ErrTruncated: the JPEG ends before its image data is complete.
	ErrTruncated = jpeg.ErrTruncated
	// ErrCorrupt: the JPEG's headers or entropy-coded data are invalid.
	ErrCorrupt = jpeg.ErrCorrupt
	// ErrTooLarge: the input or an op's output would exceed a limit: the
	// declared dimensions, the scans or memory a JPEG needs, or an output's
	// bytes (see [Limits]).
	ErrTooLarge = jpeg.ErrTooLarge
	// ErrUnsupported: a valid JPEG the library does not handle.
	ErrUnsupported = jpeg.ErrUnsupported
	// ErrDeadline: a run under [Limits] (or a decode under [DecodeLimits])
	// went past its Deadline, between ops or inside the decoder. Nothing is
	// wrong with the input; the server may retry it with more time.
	ErrDeadline = jpeg.ErrDeadline

	// ErrKind: an op received a representation it cannot take.
	ErrKind = errors.New("ops: wrong input kind")
	// ErrSpec: a pipeline spec is invalid.
	ErrSpec = jpeg.ErrSpec
	// ErrSplit: a split point is outside [0, n].
	ErrSplit = errors.New("ops: split out of range")
)

// SampleError names the sample and op that failed. Err wraps one of the
// package's sentinel errors.
type SampleError struct {
	Sample uint64
	Op     string
	Err    error
}

func (e *SampleError) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("sample %d: %v", e.Sample, e.Err)
	}
	return fmt.Sprintf("sample %d: op %s: %v", e.Sample, e.Op, e.Err)
}

func (e *SampleError) Unwrap() error { return e.Err }
