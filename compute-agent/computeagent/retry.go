package computeagent

import "time"

// Retry timing (see epoch.RetryDelay for the back-off): a stream silent
// for the stall timeout with requests out is hedged, and the discovery's
// Info calls are bounded.
const (
	// minStall is the floor of the adaptive stall timeout, stallFactor its
	// multiple of the p99 silence between responses on a busy stream.
	minStall    = 2 * time.Second
	stallFactor = 4
	// probeTimeout bounds one Info call (the probe before a stream is
	// reopened, the discovery at epoch start).
	probeTimeout = 5 * time.Second
	// probeGrace is how long the start of an epoch waits for the storage
	// agents still silent once one of them answered Info.
	probeGrace = 2 * time.Second
)

// stallTimeout is the progress deadline of a stream: Config.StallTimeout,
// or max(minStall, stallFactor x p99 silence between responses).
func (e *epochRun) stallTimeout() time.Duration {
	if e.cfg.StallTimeout > 0 {
		return e.cfg.StallTimeout
	}
	return max(minStall, stallFactor*e.lat.P99())
}
