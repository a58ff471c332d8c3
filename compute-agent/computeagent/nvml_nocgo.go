//go:build !cgo

package computeagent

import (
	"context"
	"sync"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// NVML stands in for the NVIDIA monitor in binaries built without cgo,
// which cannot load the driver: it reports why there is no GPU.
type NVML struct {
	Clock  Clock
	Logger zerolog.Logger
	once   sync.Once
}

const noCgoReason = "built without cgo"

// NewNVML returns a monitor that reports the GPU as unavailable.
func NewNVML(clock Clock, log zerolog.Logger) *NVML { return &NVML{Clock: clock, Logger: log} }

// Sample implements [GPUMonitor]: it logs the reason once and waits for ctx.
func (m *NVML) Sample(ctx context.Context) report.GPUStats {
	m.once.Do(func() { m.Logger.Warn().Msg("no GPU: " + noCgoReason) })
	<-ctx.Done()
	return report.GPUStats{Status: "nvml: unavailable: " + noCgoReason}
}

// Close implements io.Closer. Safe twice.
func (m *NVML) Close() error { return nil }
