// Package epochs is a testbed run's per-epoch account (results.Epoch) made
// from what its processes reported: the compute agents' report lines
// merged over their ranks or jobs (Agents), with each epoch's bytes on the
// links and the storage agents' CPU read from the bed's counters over the
// epoch's span (Link.Fill).
package epochs

import (
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/bed"
	"github.com/sophon-dl/sophon/testbed/results"
)

// ErrRanksDisagree: the compute agents' reports do not number their
// epochs alike.
var ErrRanksDisagree = errors.New("epochs: the ranks' reports disagree")

// Link is where an epoch's link figures come from: the bed's counter
// series over the run.
type Link struct {
	Series *bed.Series
	// Kernel: Series holds the kernel's counters (netns mode), not the
	// shaping proxies'.
	Kernel bool
	// DelayLine: the compute nodes' interfaces are the delay line's TUN
	// devices, which count IP packets: no Ethernet header.
	DelayLine bool
}

// Agents is the compute agents' epochs, with the link's bytes over each:
// one epoch per line every rank reported (ranks[i] is rank i's lines).
// With one rank an epoch is its line; with several it is the slowest
// rank's time (data-parallel training waits for it), every rank's time
// in RankSeconds, and the ranks' counts summed (see results.Epoch); with
// jobs (the ranks are independent jobs) each job's bound, prediction and
// CPU share too. The epochs are returned with the error when ranks
// disagree.
func Agents(ranks [][]report.EpochReport, jobs bool, l Link) ([]results.Epoch, error) {
	n := len(ranks[0])
	for _, rs := range ranks {
		n = min(n, len(rs))
	}
	var out []results.Epoch
	var errs []error
	for i := range n {
		first := ranks[0][i]
		e := results.Epoch{Epoch: int(first.Epoch)}
		var windows [][2]int64
		for k, rs := range ranks {
			r := rs[i]
			if r.Epoch != first.Epoch {
				errs = append(errs, fmt.Errorf("%w: rank %d's line %d is epoch %d, rank 0's epoch %d", ErrRanksDisagree, k, i+1, r.Epoch, first.Epoch))
			}
			e.Seconds = max(e.Seconds, r.Seconds)
			e.PredictedSeconds = max(e.PredictedSeconds, r.PredictedSeconds)
			e.AgentBoundSeconds = max(e.AgentBoundSeconds, r.BoundSeconds)
			e.Samples += r.Samples
			e.Duplicates += r.Duplicates
			e.StreamFailures += r.StreamFailures
			e.Shed += r.Shed
			if r.ServedRaw != nil {
				e.Contended += r.ServedRaw.Contended
			}
			e.Failed += r.SamplesFailed
			e.AgentBytes += r.BytesReceived
			e.StorageCPUSeconds += r.StorageCPUSeconds
			e.ComputeCPUSeconds += r.ComputeCPUSeconds
			e.ComputeProcessCPUSeconds += r.ProcessCPUSeconds
			e.GPUIdleFraction += r.GPUIdleFraction / float64(len(ranks))
			addCache(&e, r.Cache)
			if lk := r.Link; lk != nil {
				e.RTTSeconds = max(e.RTTSeconds, lk.RTTSeconds)
				e.InFlightMeanBytes += lk.InFlightMeanBytes
				e.InFlightPeakBytes += lk.InFlightPeakBytes
				e.Retransmits += lk.Retransmits
				e.WindowCount += lk.WindowCount
			}
			e.Profiled = e.Profiled || r.Profiled
			e.Replanned = e.Replanned || r.Replanned
			if len(ranks) > 1 {
				e.RankSeconds = append(e.RankSeconds, r.Seconds)
			}
			if jobs {
				e.JobBoundSeconds = append(e.JobBoundSeconds, r.BoundSeconds)
				e.JobPredictedSeconds = append(e.JobPredictedSeconds, r.PredictedSeconds)
				e.JobShareCPUs = append(e.JobShareCPUs, r.ShareCPUs)
			}
			windows = append(windows, [2]int64{r.StartUnixNS, r.EndUnixNS})
		}
		if len(ranks) == 1 { // the account is the 1 x 1 topology's
			e.Prediction, e.StorageNSPerByte, e.Resplits = first.Prediction, first.StorageNSPerByte, first.Resplits
		}
		l.Fill(&e, windows...)
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// Fill fills e's kernel or proxy bytes, and with several nodes each
// storage link's bytes and each storage agent's CPU. windows[i] is the
// epoch of rank i, which ran on compute node i, as [start, end] in Unix
// ns: its kernel bytes are what node i's interface received over its
// rank's epoch, summed over the ranks. The proxies' bytes (loopback), the
// links' and the CPU are over the ranks' epochs together, from the first
// start to the last end: with ranks out of step they may include some of
// a neighbouring epoch's traffic.
func (l Link) Fill(e *results.Epoch, windows ...[2]int64) {
	s := l.Series
	start, end := windows[0][0], windows[0][1]
	for _, w := range windows {
		if w[0] <= 0 || w[1] <= w[0] {
			return
		}
		start, end = min(start, w[0]), max(end, w[1])
	}
	c := s.During(start, end)
	if l.Kernel {
		for i, w := range windows {
			ci := s.During(w[0], w[1])
			if i < len(ci.RX) {
				e.KernelBytes += ci.RX[i]
				e.KernelPackets += ci.RXPackets[i]
				for _, at := range w {
					if b := s.Blur(at); i < len(b) {
						e.KernelBlurBytes += int64(b[i])
					}
				}
			}
		}
		overhead := int64(results.FrameOverhead)
		if l.DelayLine {
			overhead -= 14 // the delay line's TUN devices count IP packets: no Ethernet header
		}
		e.KernelPayloadBytes = max(0, e.KernelBytes-e.KernelPackets*overhead)
	} else if len(c.RX) > 0 {
		e.ProxyBytes = c.RX[0]
	}
	if len(c.Links) > 0 {
		e.LinkBytes = c.Links
		for _, ns := range c.CPU {
			e.StorageAgentCPUSeconds = append(e.StorageAgentCPUSeconds, float64(ns)/1e9)
		}
	}
}

// addCache adds a rank's cache account of an epoch to e's.
func addCache(e *results.Epoch, c *report.CacheStats) {
	if c == nil {
		return
	}
	if e.Cache == nil {
		e.Cache = &results.CacheEpoch{}
	}
	e.Cache.Hits += c.Hits
	e.Cache.Misses += c.Misses
	e.Cache.Refills += c.Refills
	e.Cache.ReadBytes += c.ReadBytes
	e.Cache.ResidentBytes += c.ResidentBytes
	e.Cache.ResidentSamples += c.ResidentSamples
}
