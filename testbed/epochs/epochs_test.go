package epochs

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/bed"
	"github.com/sophon-dl/sophon/testbed/results"
)

// rankReport is a report line of a rank's epoch.
func rankReport(epoch uint64, secs float64, start int64, samples int) report.EpochReport {
	return report.EpochReport{Epoch: epoch, Seconds: secs, StartUnixNS: start, EndUnixNS: start + int64(secs*1e9),
		Samples: samples, BytesReceived: int64(samples) * 1000, StorageCPUSeconds: 0.5, ComputeCPUSeconds: 1, GPUIdleFraction: 0.2,
		PredictedSeconds: secs - 0.1}
}

// TestAgentsRanks: two ranks' report lines make one epoch each: the
// slowest rank's time, each rank's, the sums, and the counters: each
// compute node's received bytes over its own rank's epoch, each storage
// link's bytes and agent's CPU over the ranks' epochs together.
func TestAgentsRanks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := int64(time.Second)
	// Counters grow linearly: compute node i receives (i+1) MB/s, storage
	// link j sends (j+1) x 10 MB/s, storage agent j burns (j+1)/10 core.
	s := &bed.Series{}
	for k := range int64(11) {
		s.Add(t0.Add(time.Duration(k*sec)), bed.Counts{
			RX: []int64{k * 1e6, 2 * k * 1e6}, RXPackets: []int64{k * 100, k * 200},
			Links: []int64{k * 10e6, k * 20e6}, CPU: []int64{k * sec / 10, k * sec / 5},
		})
	}
	start := t0.UnixNano()
	ranks := [][]report.EpochReport{
		{rankReport(0, 2, start+sec, 30), rankReport(1, 1, start+4*sec, 30)},
		{rankReport(0, 3, start+2*sec, 30), rankReport(1, 2, start+5*sec, 30), rankReport(2, 1, start+8*sec, 30)},
	}
	// Each rank's link: the largest round trip, the rest summed.
	ranks[0][0].Link = &report.Link{RTTSeconds: 0.08, InFlightMeanBytes: 4e6, InFlightPeakBytes: 5e6, Retransmits: 1, WindowCount: 400}
	ranks[1][0].Link = &report.Link{RTTSeconds: 0.09, InFlightMeanBytes: 1e6, InFlightPeakBytes: 2e6, Retransmits: 2, WindowCount: 100}
	// Offloads sent raw: shed by each compute agent, answered raw by the
	// storage agents (rank 1 was answered none).
	ranks[0][0].Shed, ranks[0][0].ServedRaw = 4, &report.ServedRaw{Contended: 2}
	ranks[1][0].Shed = 1
	eps, err := Agents(ranks, false, Link{Series: s, Kernel: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 {
		t.Fatalf("%d epochs, want the 2 both ranks reported", len(eps))
	}
	e := eps[0]
	// Rank 0's epoch 0 is [1, 3] s, rank 1's [2, 5] s: together [1, 5].
	want := results.Epoch{Epoch: 0, Seconds: 3, PredictedSeconds: 2.9, Samples: 60, AgentBytes: 60000,
		StorageCPUSeconds: 1, ComputeCPUSeconds: 2, GPUIdleFraction: 0.2,
		KernelBytes: 2e6 + 6e6, KernelPackets: 200 + 600, KernelPayloadBytes: 8e6 - 800*results.FrameOverhead,
		RankSeconds: []float64{2, 3}, LinkBytes: []int64{40e6, 80e6}, StorageAgentCPUSeconds: []float64{0.4, 0.8},
		RTTSeconds: 0.09, InFlightMeanBytes: 5e6, InFlightPeakBytes: 7e6, Retransmits: 3, WindowCount: 500,
		Shed: 5, Contended: 2}
	if fmt.Sprintf("%+v", e) != fmt.Sprintf("%+v", want) {
		t.Errorf("epoch 0:\n got %+v\nwant %+v", e, want)
	}
	if e := eps[1]; e.Seconds != 2 || !slices.Equal(e.RankSeconds, []float64{1, 2}) || e.Samples != 60 {
		t.Errorf("epoch 1: %+v", e)
	}

	// Loopback: the proxies' bytes over the ranks' epochs together.
	s = &bed.Series{}
	for k := range int64(11) {
		s.Add(t0.Add(time.Duration(k*sec)), bed.Counts{RX: []int64{k * 1e6}, RXPackets: []int64{0}})
	}
	eps, err = Agents(ranks, false, Link{Series: s})
	if err != nil {
		t.Fatal(err)
	}
	if e := eps[0]; e.ProxyBytes != 4e6 || e.KernelBytes != 0 || e.LinkBytes != nil {
		t.Errorf("loopback epoch 0: %+v", e)
	}

	// Ranks that number their epochs apart.
	ranks[1][0].Epoch = 7
	if _, err := Agents(ranks, false, Link{Series: s}); !errors.Is(err, ErrRanksDisagree) {
		t.Errorf("disagreeing ranks: %v, want ErrRanksDisagree", err)
	}
}

// TestAgentsJobs: independent jobs keep each job's bound, prediction and
// CPU share, their caches sum, and on the delay line a packet's overhead
// has no Ethernet header.
func TestAgentsJobs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := int64(time.Second)
	s := &bed.Series{}
	for k := range int64(11) {
		s.Add(t0.Add(time.Duration(k*sec)), bed.Counts{RX: []int64{k * 1e6, k * 1e6}, RXPackets: []int64{k * 100, k * 100}})
	}
	start := t0.UnixNano()
	ranks := [][]report.EpochReport{{rankReport(0, 2, start+sec, 30)}, {rankReport(0, 2, start+sec, 30)}}
	for i := range ranks {
		r := &ranks[i][0]
		r.BoundSeconds, r.ShareCPUs = float64(i+1), 0.5
		r.Cache = &report.CacheStats{Hits: 10, Misses: 20, ReadBytes: 1000}
	}
	eps, err := Agents(ranks, true, Link{Series: s, Kernel: true, DelayLine: true})
	if err != nil {
		t.Fatal(err)
	}
	e := eps[0]
	if !slices.Equal(e.JobBoundSeconds, []float64{1, 2}) || !slices.Equal(e.JobPredictedSeconds, []float64{1.9, 1.9}) || !slices.Equal(e.JobShareCPUs, []float64{0.5, 0.5}) {
		t.Errorf("jobs: bounds %v, predictions %v, shares %v", e.JobBoundSeconds, e.JobPredictedSeconds, e.JobShareCPUs)
	}
	if c := e.Cache; c == nil || c.Hits != 20 || c.Misses != 40 || c.ReadBytes != 2000 {
		t.Errorf("cache %+v, want both jobs' summed", c)
	}
	if want := int64(4e6 - 400*(results.FrameOverhead-14)); e.KernelBytes != 4e6 || e.KernelPayloadBytes != want {
		t.Errorf("kernel bytes %d, payload %d; want 4e6 and %d", e.KernelBytes, e.KernelPayloadBytes, want)
	}
}
