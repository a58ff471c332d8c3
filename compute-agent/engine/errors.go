package engine

import "errors"

// The engine's errors. The root re-exports each under the same name, so
// errors.Is holds across the two.
var (
	// ErrSample is wrapped by the error of an epoch failed by a bad sample
	// (OnError "fail"); the error names the sample.
	ErrSample = errors.New("engine: bad sample")
	// ErrNoStorage: no storage agent can serve the epoch.
	ErrNoStorage = errors.New("engine: no usable storage agent")
	// ErrUnavailable: samples of the epoch that no live storage agent holds.
	ErrUnavailable = errors.New("engine: samples unavailable")
	// ErrFingerprint: a storage agent serves a different dataset than the
	// catalog's.
	ErrFingerprint = errors.New("engine: dataset fingerprint mismatch")
	// ErrCatalog marks a malformed catalog stream.
	ErrCatalog = errors.New("engine: bad catalog")
	// ErrContentMismatch: a storage agent sent raw bytes whose SHA-256 is not
	// the catalog's content hash for that sample. The agent is refused for the
	// rest of the run.
	ErrContentMismatch = errors.New("engine: sample content does not match the catalog")
)
