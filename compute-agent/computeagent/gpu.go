package computeagent

import (
	"context"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// GPUSampleInterval is how often a GPU monitor samples utilisation.
const GPUSampleInterval = 500 * time.Millisecond

// GPUMonitor samples GPU utilisation. Sample blocks until ctx ends and
// returns what it saw meanwhile.
type GPUMonitor interface {
	Sample(ctx context.Context) report.GPUStats
}
