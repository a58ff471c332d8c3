package engine

import "time"

// Retry timing (see schedule.RetryDelay for the back-off): a stream silent
// for the stall timeout with requests out is hedged.
const (
	// minStall is the floor of the adaptive stall timeout, stallFactor its
	// multiple of the p99 silence between responses on a busy stream.
	minStall    = 2 * time.Second
	stallFactor = 4
)

// ProbeTimeout bounds one Info call (the probe before a stream is
// reopened, the discovery at epoch start).
const ProbeTimeout = 5 * time.Second

// stallTimeout is the progress deadline of a stream: Config.StallTimeout,
// or max(minStall, stallFactor x p99 silence between responses).
func (e *Epoch) stallTimeout() time.Duration {
	if e.cfg.StallTimeout > 0 {
		return e.cfg.StallTimeout
	}
	return max(minStall, stallFactor*e.lat.P99())
}
