//go:build cgo

package computeagent

import (
	"context"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// NVML samples every device's utilisation through the NVIDIA driver. Where
// there is no driver it logs the reason once and reports it; it never
// fails the agent.
type NVML struct {
	Clock  Clock
	Logger zerolog.Logger

	once    sync.Once
	err     error
	devices []nvml.Device
	closed  sync.Once
}

// NewNVML returns a monitor that initialises NVML on first use.
func NewNVML(clock Clock, log zerolog.Logger) *NVML { return &NVML{Clock: clock, Logger: log} }

func (m *NVML) init() {
	m.once.Do(func() {
		if ret := nvml.Init(); ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			m.err = fmt.Errorf("no NVIDIA driver (libnvidia-ml.so.1 not found)")
			m.Logger.Warn().Msg("no GPU: " + m.err.Error())
			return
		} else if ret != nvml.SUCCESS {
			m.err = fmt.Errorf("init: %v", nvml.ErrorString(ret))
			m.Logger.Warn().Str("reason", m.err.Error()).Msg("no GPU: " + m.err.Error())
			return
		}
		n, ret := nvml.DeviceGetCount()
		if ret != nvml.SUCCESS {
			m.err = fmt.Errorf("device count: %v", nvml.ErrorString(ret))
		} else if n == 0 {
			m.err = fmt.Errorf("no devices")
		}
		for i := range n {
			d, ret := nvml.DeviceGetHandleByIndex(i)
			if ret != nvml.SUCCESS {
				m.err = fmt.Errorf("device %d: %v", i, nvml.ErrorString(ret))
				break
			}
			m.devices = append(m.devices, d)
		}
		if m.err != nil {
			m.Logger.Warn().Str("reason", m.err.Error()).Msg("no GPU: " + m.err.Error())
			nvml.Shutdown()
			m.devices = nil
			return
		}
		m.Logger.Info().Int("devices", len(m.devices)).Msg("nvml: sampling GPU utilisation")
	})
}

// Sample implements [GPUMonitor].
func (m *NVML) Sample(ctx context.Context) report.GPUStats {
	m.init()
	if m.err != nil {
		return report.GPUStats{Status: "nvml: unavailable: " + m.err.Error()}
	}
	st := report.GPUStats{Status: "nvml: ok", Devices: len(m.devices)}
	clock := m.Clock
	if clock == nil {
		clock = SystemClock()
	}
	var sum float64
	var n int
	for {
		for _, d := range m.devices {
			u, ret := d.GetUtilizationRates()
			if ret == nvml.SUCCESS {
				sum += float64(u.Gpu)
				n++
			}
		}
		st.Samples++
		if clock.Sleep(ctx, GPUSampleInterval) != nil {
			break
		}
	}
	if n > 0 {
		st.MeanUtil = sum / float64(n)
	}
	return st
}

// Close shuts NVML down if it was initialised. Safe twice.
func (m *NVML) Close() error {
	m.closed.Do(func() {
		if m.devices != nil {
			nvml.Shutdown()
		}
	})
	return nil
}
