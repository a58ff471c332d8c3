package computeagent

import (
	"context"
	"time"
)

// GPUSampleInterval is how often a GPU monitor samples utilisation.
const GPUSampleInterval = 500 * time.Millisecond

// GPUStats is what a GPU monitor saw during one epoch.
type GPUStats struct {
	// Status is "nvml: ok" or "nvml: unavailable: <reason>".
	Status  string `json:"status"`
	Devices int    `json:"devices"`
	// Samples is the number of utilisation readings taken; MeanUtil their
	// mean over readings and devices, in percent.
	Samples  int     `json:"samples"`
	MeanUtil float64 `json:"mean_util_pct"`
}

// GPUMonitor samples GPU utilisation. Sample blocks until ctx ends and
// returns what it saw meanwhile.
type GPUMonitor interface {
	Sample(ctx context.Context) GPUStats
}
