package engine

import "errors"

// The engine's errors. The root re-exports each under the same name, so
// errors.Is holds across the two, but ErrConfig and ErrSkipped, which it
// maps to its own.
var (
	// ErrSample is wrapped by the error of an epoch failed by a bad sample
	// (OnError "fail"); the error names the sample.
	ErrSample = errors.New("engine: bad sample")
	// ErrNoStorage: no storage agent can serve the epoch.
	ErrNoStorage = errors.New("engine: no usable storage agent")
	// ErrUnavailable: samples of the epoch that no live storage agent holds.
	ErrUnavailable = errors.New("engine: samples unavailable")
	// ErrContentMismatch: a storage agent sent raw bytes whose SHA-256 is not
	// the catalog's content hash for that sample. The agent is refused for the
	// rest of the run.
	ErrContentMismatch = errors.New("engine: sample content does not match the catalog")
	// ErrConfig: what the agent's configuration asks of the epoch cannot
	// be done (a plan split the pipeline does not have, a cache that
	// cannot be opened).
	ErrConfig = errors.New("engine: bad config")
	// ErrSkipped: the state dir says the epoch completed before a restart,
	// so Run did not run it.
	ErrSkipped = errors.New("engine: epoch completed before the restart")
)
