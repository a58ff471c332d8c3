package ops

import (
	"errors"
	"fmt"
)

// Errors returned by the op library. Callers test them with errors.Is; the
// agents map them to per-sample error kinds.
var (
	// ErrEmpty: the input has no bytes.
	ErrEmpty = errors.New("ops: empty input")
	// ErrNotJPEG: the input does not start with a JPEG SOI marker.
	ErrNotJPEG = errors.New("ops: not a jpeg")
	// ErrTruncated: the JPEG ends before its image data is complete.
	ErrTruncated = errors.New("ops: truncated jpeg")
	// ErrCorrupt: the JPEG's headers or entropy-coded data are invalid.
	ErrCorrupt = errors.New("ops: corrupt jpeg")
	// ErrTooLarge: the input or an op's output would exceed a limit: the
	// declared dimensions, the scans or memory a JPEG needs, or an output's
	// bytes (see [Limits]).
	ErrTooLarge = errors.New("ops: image too large")
	// ErrUnsupported: a valid JPEG the library does not handle.
	ErrUnsupported = errors.New("ops: unsupported jpeg")
	// ErrDeadline: a run under [Limits] (or a decode under [DecodeLimits])
	// went past its Deadline, between ops or inside the decoder. Nothing is
	// wrong with the input; the server may retry it with more time.
	ErrDeadline = errors.New("ops: deadline exceeded")

	// ErrWireHeader: a wire form whose header is malformed (magic, version,
	// kind, dtype, rank or dims).
	ErrWireHeader = errors.New("ops: bad wire header")
	// ErrWireSize: a wire form whose lengths disagree with its header.
	ErrWireSize = errors.New("ops: wire size mismatch")
	// ErrWireChecksum: the payload does not match its checksum.
	ErrWireChecksum = errors.New("ops: wire checksum mismatch")
	// ErrWireTooLarge: the declared payload exceeds the decoder's limits
	// (this is how a decompression bomb is refused).
	ErrWireTooLarge = errors.New("ops: wire payload too large")
	// ErrWireCodec: the compressed payload cannot be decompressed.
	ErrWireCodec = errors.New("ops: wire codec error")

	// ErrKind: an op received a representation it cannot take.
	ErrKind = errors.New("ops: wrong input kind")
	// ErrSpec: a pipeline spec is invalid.
	ErrSpec = errors.New("ops: bad pipeline spec")
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
