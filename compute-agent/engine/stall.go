package engine

import (
	"time"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
)

// ProbeTimeout bounds one Info call (the probe before a stream is
// reopened, the discovery at epoch start).
const ProbeTimeout = 5 * time.Second

// stallTimeout is the progress deadline of a stream: Config.StallTimeout,
// or one adapted to the silences between responses
// (schedule.Latencies.StallTimeout); counting the round trip (countRTT).
func (e *Epoch) stallTimeout() time.Duration {
	return e.countRTT(e.lat.StallTimeout(e.cfg.StallTimeout))
}

// countRTT is deadline d raised by the round trip where it is shorter
// than a few of it (linkwatch.CountRTT). The round trip is the longest
// mean of the epoch's links (link.go; 0 before the first reading, which
// leaves d as it is).
func (e *Epoch) countRTT(d time.Duration) time.Duration {
	return linkwatch.CountRTT(d, e.rtt())
}

// rtt is the longest mean round trip of the epoch's links (0: none read).
func (e *Epoch) rtt() time.Duration {
	var m time.Duration
	for _, f := range e.fs {
		m = max(m, f.link.MeanRTT())
	}
	return m
}
