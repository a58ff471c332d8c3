package computeagent

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sophon-dl/sophon/compute-agent/fetch"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Stage 1 sizes.
const (
	// probeKeep is how many raw samples the link probe keeps for the
	// compute CPU measurement.
	probeKeep = 32
	// speedSamples is how many samples are fetched at split n to measure
	// the storage CPU and its speed relative to this node's.
	speedSamples = 8
)

// stage1Result is what stage 1 measured and decided.
type stage1Result struct {
	decision profiler.Decision
	res      policy.Resources
}

// summary is the decision as the first epoch's report carries it.
func (s stage1Result) summary() report.Stage1Summary {
	d := s.decision
	return report.Stage1Summary{
		LinkBytesPerSec:       d.Rates.LinkBytesPerSec,
		ComputeSamplesPerSec:  d.Rates.ComputeSamplesPerSec,
		StorageSamplesPerSec:  d.Rates.StorageSamplesPerSec,
		GPUSamplesPerSec:      d.Rates.GPUSamplesPerSec,
		StorageSpeed:          s.res.StorageSpeed,
		PredictedNoOffSeconds: d.PredictedNoOffSeconds,
		Bottleneck:            d.Bottleneck,
		Stage2:                d.RunStage2,
		Forced:                d.Forced,
		Reason:                d.Reason,
		Profile:               report.ProfileNone,
	}
}

// probeResult is what one probe stream saw.
type probeResult struct {
	bytes     int64
	elapsed   time.Duration
	raw       map[uint64][]byte // raw files of some samples (split 0 probes)
	storageNS map[uint64]int64  // storage_cpu_ns by sample
}

// probe fetches samples at split k from f on one Fetch stream, keeping up
// to window requests in flight, until every sample was answered or, when
// budget is positive, budget has passed (the requests then in flight are
// still received and counted). It keeps the raw bytes of up to keep
// samples.
func (a *Agent) probe(ctx context.Context, f *fetch.Fetcher, samples []uint64, epoch uint64, k, window int, budget time.Duration, keep int) (probeResult, error) {
	res := probeResult{raw: map[uint64][]byte{}, storageNS: map[uint64]int64{}}
	if len(samples) == 0 {
		return res, nil
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := f.Client().Fetch(sctx)
	if err != nil {
		return res, err
	}
	clock := a.cfg.Clock
	start := clock.Now()
	sent, got := 0, 0
	send := func() error {
		req := &dataplanepb.FetchRequest{
			Tag: uint64(sent), Sample: samples[sent], Epoch: epoch, Seed: a.cfg.Seed,
			Split: uint32(k), PipelineId: a.pipeID,
		}
		if sent == 0 {
			req.PipelineSpec = a.pipeSpec
		}
		sent++
		return stream.Send(req)
	}
	for sent < min(max(window, 1), len(samples)) {
		if err := send(); err != nil {
			return res, err
		}
	}
	lim := ops.WireLimits{MaxPayload: a.cfg.MaxPayload}
	for got < sent {
		resp, err := stream.Recv()
		if err != nil {
			return res, err
		}
		got++
		res.bytes += int64(len(resp.GetData()))
		if resp.GetError() == nil {
			s := resp.GetSample()
			res.storageNS[s] = int64(resp.GetStorageCpuNs())
			if k == 0 && len(res.raw) < keep {
				if v, err := ops.DecodeWire(resp.GetData(), lim); err == nil {
					if b, ok := v.(ops.Encoded); ok {
						res.raw[s] = b
					}
				}
			}
		}
		if sent < len(samples) && (budget <= 0 || clock.Now().Sub(start) < budget) {
			if err := send(); err != nil {
				return res, err
			}
		}
	}
	res.elapsed = clock.Now().Sub(start)
	return res, stream.CloseSend()
}

// probeAll runs probe on every storage agent at once, agent i taking the
// samples at positions i, i+len(fs), ... of samples.
func (a *Agent) probeAll(ctx context.Context, fs []*fetch.Fetcher, samples []uint64, k int, budget time.Duration, keep int) ([]probeResult, error) {
	out := make([]probeResult, len(fs))
	g, gctx := errgroup.WithContext(ctx)
	for i, f := range fs {
		var mine []uint64
		for j := i; j < len(samples); j += len(fs) {
			mine = append(mine, samples[j])
		}
		g.Go(func() error {
			r, err := a.probe(gctx, f, mine, a.cfg.FirstEpoch, k, a.cfg.Window, budget, keep)
			if err != nil {
				return fmt.Errorf("computeagent: stage 1: split %d from %s: %w", k, f.Name(), err)
			}
			out[i] = r
			return nil
		})
	}
	return out, g.Wait()
}

// stage1 measures the rate of each resource for a bounded time and decides
// whether stage 2 runs: the link (raw fetches of at most one pass over the
// shard, every storage agent at once), the storage CPU and its speed
// relative to this node's (a few samples fetched at split n, their
// storage_cpu_ns against the same work timed here), this node's CPU for the
// full pipeline (profiler.MeasureComputeRate with Config.Workers) and the
// consumer's rate.
func (a *Agent) stage1(ctx context.Context, fs []*fetch.Fetcher, cat *Catalog, shard []uint64) (stage1Result, error) {
	cfg := &a.cfg
	linkRate, ids, raws, err := a.measureLink(ctx, fs, shard)
	if err != nil {
		return stage1Result{}, err
	}
	st, err := a.measureStorage(ctx, fs, ids, raws)
	if err != nil {
		return stage1Result{}, err
	}
	var computeRate float64
	if len(ids) > 0 {
		samples := make([][]byte, len(ids))
		for i, id := range ids {
			samples[i] = raws[id]
		}
		computeRate, err = profiler.MeasureComputeRate(ctx, cfg.Pipeline, samples, cfg.ProfileBudget, cfg.Workers)
		if err != nil {
			if ctx.Err() != nil {
				return stage1Result{}, err
			}
			a.log.Warn().Err(err).Msg("stage 1: compute rate not measured")
			computeRate = 0
		}
	}
	gpu := a.gpuRate()

	var rawSum float64
	for _, s := range shard {
		rawSum += float64(cat.RawSizes[s])
	}
	rates := profiler.Rates{
		LinkBytesPerSec:      linkRate,
		StorageSamplesPerSec: st.rate,
		ComputeSamplesPerSec: computeRate,
		GPUSamplesPerSec:     gpu,
		Samples:              len(shard),
	}
	if len(shard) > 0 {
		rates.MeanRawBytes = rawSum / float64(len(shard))
	}
	var opts []profiler.Stage1Option
	if cfg.ForceProfile {
		opts = append(opts, profiler.Force())
	}
	return stage1Result{
		decision: profiler.Stage1(rates, opts...),
		res: policy.Resources{
			LinkBytesPerSec:  linkRate,
			StorageCores:     st.cores,
			ComputeCores:     float64(cfg.Workers),
			GPUSamplesPerSec: gpu,
			StorageSpeed:     st.speed,
		},
	}, nil
}

// measureLink fetches the shard raw from every storage agent at once for
// at most Config.ProfileBudget and returns the link rate and the samples
// kept (their ids in ascending order, and their bytes).
func (a *Agent) measureLink(ctx context.Context, fs []*fetch.Fetcher, shard []uint64) (rate float64, ids []uint64, raws map[uint64][]byte, err error) {
	link, err := a.probeAll(ctx, fs, shard, 0, a.cfg.ProfileBudget, probeKeep)
	if err != nil {
		return 0, nil, nil, err
	}
	var bytes int64
	var elapsed time.Duration
	raws = map[uint64][]byte{}
	for _, r := range link {
		bytes += r.bytes
		elapsed = max(elapsed, r.elapsed)
		maps.Copy(raws, r.raw)
	}
	if elapsed > 0 {
		rate = float64(bytes) / elapsed.Seconds()
	}
	return rate, slices.Sorted(maps.Keys(raws)), raws, nil
}

// storageRates is what measureStorage found.
type storageRates struct {
	speed float64 // the storage CPU's speed relative to this node's
	cores float64 // the storage agents' cores together
	rate  float64 // their samples per second for the whole pipeline (0: unmeasured)
}

// measureStorage fetches a few of the samples kept (ids, raws) at split n
// and compares their storage CPU with the same work timed here: the
// storage CPU and its speed, the whole pipeline on both sides.
func (a *Agent) measureStorage(ctx context.Context, fs []*fetch.Fetcher, ids []uint64, raws map[uint64][]byte) (storageRates, error) {
	cfg := &a.cfg
	speedIDs := ids[:min(len(ids), speedSamples)]
	full, err := a.probeAll(ctx, fs, speedIDs, cfg.Pipeline.Len(), 0, 0)
	if err != nil {
		return storageRates{}, err
	}
	storageNS := map[uint64]int64{}
	for _, r := range full {
		maps.Copy(storageNS, r.storageNS)
	}
	var local, remote []int64
	var remoteSum float64
	for _, id := range speedIDs {
		sns, ok := storageNS[id]
		if !ok {
			continue
		}
		key := ops.Key{Seed: cfg.Seed, Epoch: cfg.FirstEpoch, Sample: id}
		local = append(local, localCost(cfg.Pipeline, key, raws[id]))
		remote = append(remote, sns)
		remoteSum += float64(sns)
	}
	st := storageRates{speed: profiler.SpeedRatio(local, remote)}
	for _, f := range fs {
		st.cores += f.CPUs()
	}
	if len(remote) > 0 && remoteSum > 0 && st.cores > 0 {
		st.rate = st.cores / (remoteSum / 1e9 / float64(len(remote)))
	}
	return st, nil
}

// localCost is the thread CPU time of the whole pipeline on raw here: the
// smaller of two runs, so the first run's cold caches do not count. A run
// that fails costs 0 (SpeedRatio skips it).
func localCost(p *ops.Pipeline, key ops.Key, raw []byte) int64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := int64(-1)
	for range 2 {
		t0 := cpuclock.Thread()
		if _, err := p.Run(key, ops.Encoded(raw), 0, p.Len()); err != nil {
			return 0
		}
		d := int64(cpuclock.Thread() - t0)
		if best < 0 || d < best {
			best = d
		}
	}
	return best
}

// rated is a consumer that knows its rate.
type rated interface {
	// Rate is the samples per second consumed at batch size batch; zero
	// means unknown.
	Rate(batch int) float64
}

// gpuRate is the consumer's rate, zero (unlimited) when it does not say.
func (a *Agent) gpuRate() float64 {
	if r, ok := a.cfg.Consumer.(rated); ok {
		return r.Rate(a.cfg.Batch)
	}
	return 0
}
