package engine

import "errors"

// The engine's errors. Their texts keep the computeagent prefix they had
// before the engine left the root package: operators and scripts match
// them, and the root re-exports each under its old name, so errors.Is
// holds across the two.
var (
	// ErrSample is wrapped by the error of an epoch failed by a bad sample
	// (OnError "fail"); the error names the sample.
	ErrSample = errors.New("computeagent: bad sample")
	// ErrNoStorage: no storage agent can serve the epoch.
	ErrNoStorage = errors.New("computeagent: no usable storage agent")
	// ErrUnavailable: samples of the epoch that no live storage agent holds.
	ErrUnavailable = errors.New("computeagent: samples unavailable")
	// ErrFingerprint: a storage agent serves a different dataset than the
	// catalog's.
	ErrFingerprint = errors.New("computeagent: dataset fingerprint mismatch")
	// ErrCatalog marks a malformed catalog stream.
	ErrCatalog = errors.New("computeagent: bad catalog")
	// ErrContentMismatch: a storage agent sent raw bytes whose SHA-256 is not
	// the catalog's content hash for that sample. The agent is refused for the
	// rest of the run.
	ErrContentMismatch = errors.New("computeagent: sample content does not match the catalog")
)
