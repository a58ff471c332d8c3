// Package stage1 is stage 1 of the compute agent's planning: measuring the
// link, the storage CPU and the compute CPU an epoch will run on, over the
// storage agents' Fetch streams, and deciding with the consumer's rate
// whether stage 2 profiles (profiler.Stage1). Run probes before the first
// epoch (the link from raw fetches, every storage agent at once; the
// storage CPU's speed relative to this node's from a few samples at the
// crop split, ProbeStorage, against the same work timed here; this node's
// CPU for the whole pipeline); RunBeside measures the same beside a
// running first epoch from its own traffic (LinkMeter, CollectRaws). The
// planner (package planner) turns the Result into a plan.
package stage1

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Stage 1 sizes.
const (
	// probeKeep is how many raw samples the link probe keeps for the
	// compute CPU measurement.
	probeKeep = 32
	// speedSamples is the fewest samples fetched at probeSplit to measure
	// the storage CPU and its speed relative to this node's (more while
	// the probe spans less than storageSpan).
	speedSamples = 8
	// QuickBudget bounds the link probe and the compute measurement of a
	// Quick stage 1 (a run that plans its first epoch from header
	// estimates, whose first batch waits for stage 1).
	QuickBudget = 400 * time.Millisecond
	// quickWindow bounds a Quick stage 1's requests in flight per probe
	// stream: what is in flight when the budget ends is still received,
	// and a full window of raw files (64 photos of 300 KB: 19 MB) takes
	// seconds to drain over a slow link. A few files in flight keep a
	// LAN link busy.
	quickWindow = 8
)

// Config is what stage 1 takes from the agent's configuration.
type Config struct {
	Log zerolog.Logger
	// Now is the agent's clock.
	Now func() time.Time
	// Pipeline is the agent's pipeline, PipelineID its id and
	// PipelineSpec its spec for the first request of a stream (nil for a
	// preset).
	Pipeline     *ops.Pipeline
	PipelineID   string
	PipelineSpec []byte
	// Seed and Epoch name the probes' requests (the run's first epoch).
	Seed, Epoch uint64
	// Window bounds each probe stream's requests in flight; MaxPayload a
	// response's decoded payload (wireform.Limits).
	Window     int
	MaxPayload int
	// Budget bounds the link probe and the compute measurement
	// (computeagent.Config.ProfileBudget).
	Budget time.Duration
	// Quick bounds them by QuickBudget as well, and each probe stream's
	// requests in flight by quickWindow, measures the storage
	// speed on half the samples and takes the compute rate from those
	// samples' pipeline timed here rather than from the workers running
	// for a budget: the run plans its first epoch from header estimates,
	// whose first batch waits for stage 1; the epochs' own measurements
	// correct what a short probe misjudged (the link rate, by drift).
	Quick bool
	// Workers is this node's finishing workers.
	Workers int
	// Cores is the compute cores the model gets: the least of Workers and
	// the CPU quota and CPUs the agent runs under (cpuquota.Cores); zero
	// means Workers.
	Cores float64
	// Force runs stage 2 whatever the bottleneck (profiler.Force).
	Force bool
	// GPURate is the consumer's samples per second (0: unknown).
	GPURate float64
	// Limits bound the local measurement's pipeline runs, as the
	// finishing workers' (computeagent.Config's limits); a sample they
	// refuse is not measured. Zero fields: no limit.
	Limits oplimits.Settings
}

// Source is a storage agent stage 1 probes (the compute agent's fetcher).
type Source interface {
	Name() string
	Client() dataplanepb.StorageClient
	// CPUs is the agent's cores this job plans for: its share of the
	// agent's budget (0: unknown).
	CPUs() float64
}

// Result is what stage 1 measured and decided.
type Result struct {
	Decision profiler.Decision
	Res      policy.Resources
	// Nodes is each storage agent, in the order of the sources: its name,
	// the cores it announced and the raw bytes per second it sent during
	// the link probe, all agents at once (Resources.Over spreads the
	// pooled figures in these proportions).
	Nodes []policy.StorageNode
	// Raws is the raw files the link probe kept (up to probeKeep, by
	// sample id), which the compute measurement ran: the calibration
	// samples of a plan from header estimates (planner.Estimate).
	Raws map[uint64][]byte
	// Seconds is how long stage 1 took.
	Seconds float64
	// SpeedRSE is the relative standard error of Res.StorageSpeed (0:
	// fewer than two samples compared).
	SpeedRSE float64
	// Probe is the storage probe's samples and what each cost the
	// storage agents (StorageProbe.SpeedAgainst prices them against a
	// profile's op costs).
	Probe StorageProbe
	// Link is the round trip and loss to the storage agents over the link
	// probe, all together, and Links each one's, in the order of the
	// sources (LinkWatch): what the windows by bandwidth x round trip and
	// a connection pool's size start from. Zero when unmeasured (Run
	// measures them; RunBeside's caller sets them).
	Link  linkwatch.Span
	Links []linkwatch.Span
}

// RTT is the round trip windows are sized by: the least the link probe
// saw (the path's own), else its mean; 0 when unmeasured.
func (s Result) RTT() time.Duration {
	if s.Link.MinRTT > 0 {
		return s.Link.MinRTT
	}
	return s.Link.RTT
}

// Loss is the share of the storage agents' segments sent again during the
// link probe; ok is false when a storage agent did not report its end.
func (s Result) Loss() (loss float64, ok bool) { return s.Link.Loss(), s.Link.LossKnown }

// Summary is the decision as the first epoch's report carries it.
func (s Result) Summary() report.Stage1Summary {
	d := s.Decision
	return report.Stage1Summary{
		LinkBytesPerSec:       d.Rates.LinkBytesPerSec,
		ComputeSamplesPerSec:  d.Rates.ComputeSamplesPerSec,
		ComputeCores:          s.Res.ComputeCores,
		StorageSamplesPerSec:  d.Rates.StorageSamplesPerSec,
		GPUSamplesPerSec:      d.Rates.GPUSamplesPerSec,
		StorageSpeed:          s.Res.StorageSpeed,
		StorageSpeedRSE:       s.SpeedRSE,
		PredictedNoOffSeconds: d.PredictedNoOffSeconds,
		Bottleneck:            d.Bottleneck,
		Stage2:                d.RunStage2,
		Forced:                d.Forced,
		Reason:                d.Reason,
		Profile:               report.ProfileNone,
		Seconds:               s.Seconds,
		Link:                  s.linkReport(),
	}
}

// linkReport is Link as the report carries it; nil when unmeasured.
func (s Result) linkReport() *report.Link {
	if s.Link.RTT == 0 && s.Link.MinRTT == 0 && !s.Link.LossKnown {
		return nil
	}
	return s.Link.Report()
}

// probeResult is what one probe stream saw.
type probeResult struct {
	bytes     int64
	elapsed   time.Duration
	raw       map[uint64][]byte // raw files of some samples (split 0 probes)
	storageNS map[uint64]int64  // storage_cpu_ns by sample
	budgetNS  map[uint64]int64  // storage_budget_ns by sample (0: not reported)
}

// probeSpan is what a stage 1 probe covers: how long it keeps requesting,
// once it has least samples, and how many it wants at least.
type probeSpan struct {
	budget time.Duration // 0: no limit
	least  int
	// warm is how many of each stream's first samples it asks once
	// before the others, untimed: what they cost is not kept, and they
	// are asked again in their turn.
	warm int
}

// probe fetches samples at split k from f on one Fetch stream, keeping up
// to window requests in flight, until every sample was answered or, when
// span.budget is positive, it has passed and span.least samples were
// requested (the requests then in flight are still received and counted).
// It keeps the raw bytes of up to keep samples.
func (cfg *Config) probe(ctx context.Context, client dataplanepb.StorageClient, samples []uint64, epoch uint64, k, window int, span probeSpan, keep int) (probeResult, error) {
	res := probeResult{raw: map[uint64][]byte{}, storageNS: map[uint64]int64{}, budgetNS: map[uint64]int64{}}
	if len(samples) == 0 {
		return res, nil
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Fetch(sctx)
	if err != nil {
		return res, err
	}
	warm := min(span.warm, len(samples))
	if warm > 0 {
		samples = append(slices.Clone(samples[:warm]), samples...)
		span.least += warm
	}
	start := cfg.Now()
	sent, got := 0, 0
	send := func() error {
		req := &dataplanepb.FetchRequest{
			Tag: uint64(sent), Sample: samples[sent], Epoch: epoch, Seed: cfg.Seed,
			Split: uint32(k), PipelineId: cfg.PipelineID,
		}
		if sent == 0 {
			req.PipelineSpec = cfg.PipelineSpec
		}
		sent++
		return stream.Send(req)
	}
	for sent < min(max(window, 1), len(samples)) {
		if err := send(); err != nil {
			return res, err
		}
	}
	lim := wireform.Limits{MaxPayload: cfg.MaxPayload}
	for got < sent {
		resp, err := stream.Recv()
		if err != nil {
			return res, err
		}
		got++
		res.bytes += int64(len(resp.GetData()))
		if resp.GetError() == nil && resp.GetTag() >= uint64(warm) {
			s := resp.GetSample()
			res.storageNS[s] = int64(resp.GetStorageCpuNs())
			res.budgetNS[s] = int64(resp.GetStorageBudgetNs())
			if k == 0 && len(res.raw) < keep {
				if v, err := wireform.Decode(resp.GetData(), lim); err == nil {
					if b, ok := v.(ops.Encoded); ok {
						res.raw[s] = b
					}
				}
			}
		}
		if sent < len(samples) && (span.budget <= 0 || sent < span.least || cfg.Now().Sub(start) < span.budget) {
			if err := send(); err != nil {
				return res, err
			}
		}
	}
	res.elapsed = cfg.Now().Sub(start)
	return res, stream.CloseSend()
}

// Striped is a Source reached over several connections (the compute
// agent's fetcher with its stripes, engine.Fetcher.Stripe): its clients,
// Client's first.
type Striped interface {
	Clients() []dataplanepb.StorageClient
}

// clientsOf is f's connections when striped (Striped), else its client.
func clientsOf(f Source, striped bool) []dataplanepb.StorageClient {
	if s, ok := f.(Striped); ok && striped {
		if cs := s.Clients(); len(cs) > 0 {
			return cs
		}
	}
	return []dataplanepb.StorageClient{f.Client()}
}

// every is xs at positions i, i+n, ...
func every[T any](xs []T, i, n int) []T {
	var out []T
	for j := i; j < len(xs); j += n {
		out = append(out, xs[j])
	}
	return out
}

// part is the i-th of n near-equal parts of total (the first total%n one
// more).
func part(total, i, n int) int {
	p := total / n
	if i < total%n {
		p++
	}
	return p
}

// probeAll runs probe on every storage agent at once, agent i taking the
// samples at positions i, i+len(fs), ... of samples. Striped, an agent's
// probe is spread over its connections (Striped) the same way, each
// stream with its part of window and keep: the link probe (measureLink)
// runs over the connections the first epoch will stripe over, so that
// their congestion windows and bbr's bandwidth estimates have grown
// before it (over a long round trip a fresh connection needs several
// round trips of slow start to fill its share of the path), and it
// measures the link as the epochs use it.
func (cfg *Config) probeAll(ctx context.Context, fs []Source, samples []uint64, k, window int, span probeSpan, keep int, striped bool) ([]probeResult, error) {
	parts := make([][]probeResult, len(fs))
	g, gctx := errgroup.WithContext(ctx)
	for i, f := range fs {
		mine := every(samples, i, len(fs))
		cs := clientsOf(f, striped)
		if len(cs) > 1 {
			// Never more streams than requests in flight.
			cs = cs[:min(len(cs), max(window, 1))]
		}
		parts[i] = make([]probeResult, len(cs))
		for j, c := range cs {
			g.Go(func() error {
				r, err := cfg.probe(gctx, c, every(mine, j, len(cs)), cfg.Epoch, k, part(max(window, 1), j, len(cs)), span, part(keep, j, len(cs)))
				if err != nil {
					return fmt.Errorf("stage1: split %d from %s (connection %d of %d): %w", k, f.Name(), j+1, len(cs), err)
				}
				parts[i][j] = r
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make([]probeResult, len(fs))
	for i, p := range parts {
		out[i] = mergeProbes(p)
	}
	return out, nil
}

// mergeProbes is the probe of one agent over its connections' streams:
// their bytes and samples together, over the longest stream's time.
func mergeProbes(parts []probeResult) probeResult {
	if len(parts) == 1 {
		return parts[0]
	}
	m := probeResult{raw: map[uint64][]byte{}, storageNS: map[uint64]int64{}, budgetNS: map[uint64]int64{}}
	for _, r := range parts {
		m.bytes += r.bytes
		m.elapsed = max(m.elapsed, r.elapsed)
		maps.Copy(m.raw, r.raw)
		maps.Copy(m.storageNS, r.storageNS)
		maps.Copy(m.budgetNS, r.budgetNS)
	}
	return m
}

// cores is Cores, or Workers (at least 1) when it is zero.
func (cfg *Config) cores() float64 {
	if cfg.Cores > 0 {
		return cfg.Cores
	}
	return float64(max(cfg.Workers, 1))
}

// Run measures the rate of each resource for a bounded time and decides
// whether stage 2 runs: the link (raw fetches of at most one pass over the
// shard, every storage agent at once), the storage CPU and its speed
// relative to this node's (a few samples fetched at probeSplit, their
// storage_cpu_ns against the same work timed here), this node's CPU for the
// full pipeline (profiler.MeasureComputeRateLimited with cfg.Workers and
// cfg.Limits) and the consumer's rate (cfg.GPURate). shard is the first epoch's samples and
// rawSizes the catalog's raw sizes by sample.
func Run(ctx context.Context, cfg *Config, fs []Source, rawSizes, shard []uint64) (Result, error) {
	began := cfg.Now()
	if cfg.Quick {
		c := *cfg
		if c.Budget <= 0 || c.Budget > QuickBudget {
			c.Budget = QuickBudget
		}
		if c.Window <= 0 || c.Window > quickWindow {
			c.Window = quickWindow
		}
		cfg = &c
	}
	cpu0 := processCPU(ctx, fs)
	watch := WatchLink(ctx, fs, cfg.Now)
	linkRate, nodes, ids, raws, link, err := cfg.measureLink(ctx, fs, shard)
	if err != nil {
		return Result{}, err
	}
	transport := transportCores(cpu0, processCPU(ctx, fs), link)
	st, err := cfg.measureStorage(ctx, fs, ids, raws, transport)
	if err != nil {
		return Result{}, err
	}
	var computeRate float64
	if cfg.Quick && st.localNS > 0 {
		// The speed samples' full pipeline timed here, one thread each:
		// no workers' run for a budget before the first batch.
		computeRate = cfg.cores() * 1e9 / st.localNS
	} else if len(ids) > 0 {
		samples := make([][]byte, len(ids))
		for i, id := range ids {
			samples[i] = raws[id]
		}
		computeRate, err = profiler.MeasureComputeRateLimited(ctx, cfg.Pipeline, samples, cfg.Budget, cfg.Workers, cfg.Limits.Limits(), cfg.Limits.OpTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, err
			}
			cfg.Log.Warn().Err(err).Msg("stage 1: compute rate not measured")
			computeRate = 0
		}
	}
	res := cfg.decide(linkRate, computeRate, st, nodes, raws, rawSizes, shard, began)
	watch.Finish(ctx, &res, cfg.Log)
	seedLinks(fs, res.Nodes, res.Links)
	return res, nil
}

// LinkSeeder is a Source whose epochs start their fetch windows from the
// link's last rate and round trip (the compute agent's fetcher,
// engine.Fetcher.SeedLink; linkwatch.Memory).
type LinkSeeder interface {
	SeedLink(rate float64, rtt time.Duration)
}

// seedLinks gives every source that is a LinkSeeder the rate its agent
// sent at during the link probe (nodes) and the least round trip stage 1
// read (links), where both are known: the first epoch's windows then
// start at the link's bandwidth x round trip (count, raw bytes and
// storage CPU in flight) instead of growing to it through its first
// readings, as every later epoch's start from the one before. Over a
// long round trip those readings take a few hundred milliseconds, with
// windows sized for a short path.
func seedLinks(fs []Source, nodes []policy.StorageNode, links []linkwatch.Span) {
	for i, f := range fs {
		s, ok := f.(LinkSeeder)
		if !ok || i >= len(nodes) || i >= len(links) {
			continue
		}
		if rate, rtt := nodes[i].EgressBytesPerSec, links[i].MinRTT; rate > 0 && rtt > 0 {
			s.SeedLink(rate, rtt)
		}
	}
}

// LogLink logs the round trip and loss stage 1 measured.
func (s Result) LogLink(log zerolog.Logger) {
	l := s.Link
	loss, known := s.Loss()
	log.Info().Dur("rtt", l.RTT).Dur("min_rtt", l.MinRTT).Str("rtt_from", l.From).
		Float64("loss", loss).Bool("loss_known", known).Uint64("retransmits", l.Retransmits).Uint64("segments_out", l.SegmentsOut).
		Float64("bdp_bytes", s.Res.LinkBytesPerSec*s.RTT().Seconds()).Msg("stage 1: link round trip and loss")
}

// decide is stage 1's result from what it measured: the link rate, the
// compute rate, the storage's (st), the storage nodes and the raw samples
// kept; began is when stage 1 began.
func (cfg *Config) decide(linkRate, computeRate float64, st storageRates, nodes []policy.StorageNode, raws map[uint64][]byte, rawSizes, shard []uint64, began time.Time) Result {
	gpu := cfg.GPURate
	var rawSum float64
	for _, s := range shard {
		rawSum += float64(rawSizes[s])
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
	if cfg.Force {
		opts = append(opts, profiler.Force())
	}
	return Result{
		Decision: profiler.Stage1(rates, opts...),
		Res: policy.Resources{
			LinkBytesPerSec:  linkRate,
			StorageCores:     st.cores,
			ComputeCores:     cfg.cores(),
			GPUSamplesPerSec: gpu,
			StorageSpeed:     st.speed,
		},
		Nodes:    nodes,
		Raws:     raws,
		Seconds:  cfg.Now().Sub(began).Seconds(),
		SpeedRSE: st.speedRSE,
		Probe:    st.probe,
	}
}

// RunBeside is a Quick stage 1 that runs beside the first epoch and
// takes what the epoch measured instead of probing the link: linkRate, the
// epoch's bytes over the time since it began, and raws, raw files the
// epoch received (engine.Opts.KeepRaw). probe is the storage CPU of a few
// of those samples at probeSplit (ProbeStorage, sent when the epoch began),
// compared with the same work timed here for the storage speed and the
// compute rate (as Run with Quick). Each storage agent is taken to
// have sent an equal share of linkRate. began is when the epoch began.
func RunBeside(cfg *Config, fs []Source, rawSizes, shard []uint64, raws map[uint64][]byte, probe StorageProbe, linkRate float64, began time.Time) Result {
	st := cfg.compareStorage(fs, probe, raws)
	var computeRate float64
	if st.localNS > 0 {
		computeRate = cfg.cores() * 1e9 / st.localNS
	}
	nodes := make([]policy.StorageNode, len(fs))
	for i, f := range fs {
		nodes[i] = policy.StorageNode{Name: f.Name(), Cores: f.CPUs(), EgressBytesPerSec: linkRate / float64(len(fs))}
	}
	return cfg.decide(linkRate, computeRate, st, nodes, raws, rawSizes, shard, began)
}

// measureLink fetches the shard raw from every storage agent at once for
// at most cfg.Budget and returns the link rate and the samples
// kept (their ids in ascending order, and their bytes), and each agent as
// a storage node with the rate it sent at.
func (cfg *Config) measureLink(ctx context.Context, fs []Source, shard []uint64) (rate float64, nodes []policy.StorageNode, ids []uint64, raws map[uint64][]byte, link []probeResult, err error) {
	link, err = cfg.probeAll(ctx, fs, fromMiddle(shard), 0, cfg.Window, probeSpan{budget: cfg.Budget}, probeKeep, true)
	if err != nil {
		return 0, nil, nil, nil, nil, err
	}
	var bytes int64
	var elapsed time.Duration
	raws = map[uint64][]byte{}
	nodes = make([]policy.StorageNode, len(fs))
	for i, r := range link {
		bytes += r.bytes
		elapsed = max(elapsed, r.elapsed)
		maps.Copy(raws, r.raw)
		nodes[i] = policy.StorageNode{Name: fs[i].Name(), Cores: fs[i].CPUs()}
		if r.elapsed > 0 {
			nodes[i].EgressBytesPerSec = float64(r.bytes) / r.elapsed.Seconds()
		}
	}
	if elapsed > 0 {
		rate = float64(bytes) / elapsed.Seconds()
	}
	return rate, nodes, slices.Sorted(maps.Keys(raws)), raws, link, nil
}

// fromMiddle is shard from its middle on, then its first half: the order
// the link probe asks for it, so that the samples it keeps (and the
// storage probe then prices) are not those the first epoch serves first.
// A profile recorded in that epoch (stage 2) times its first 32 samples
// at 1.36-1.40x a quiet timing and the rest at 1.16 (docs/policy.md,
// "The storage probe under a quota"), and the storage probe's speed is
// the profiled cost of the samples it asks over what the storage agent
// spent on them (StorageProbe.SpeedAgainst).
func fromMiddle(shard []uint64) []uint64 {
	h := len(shard) / 2
	return append(slices.Clip(shard[h:]), shard[:h]...)
}

// storageRates is what measureStorage found.
type storageRates struct {
	speed float64 // the storage CPU's speed relative to this node's
	// speedRSE is speed's relative standard error (speedEstimate; 0:
	// fewer than two samples compared).
	speedRSE float64
	cores    float64 // the storage agents' cores together
	rate     float64 // their samples per second for the whole pipeline (0: unmeasured)
	// localNS is the mean CPU time of the whole pipeline here over the
	// samples measured (0: none).
	localNS float64
	probe   StorageProbe
}

// Storage probe sizes.
const (
	// storageSpan is how long the storage probe keeps requesting, once it
	// has speedSamples: five periods of a CFS quota (100 ms each), so that
	// a quota's throttled periods weigh in it as they do in an epoch.
	storageSpan = 500 * time.Millisecond
	// storageWindow is the storage probe's requests in flight per agent:
	// enough to keep a worker busy while a response crosses, few enough
	// that the probe stops soon after storageSpan.
	storageWindow = 2
	// storageWarm is how many samples each agent's storage probe asks
	// once, untimed, before the timed ones: a storage agent's first eight
	// offloads cost it 1.25-1.31x what the same samples cost it in the
	// epoch the probe prices, the ones after them 0.8-1.07x
	// (docs/policy.md, "The storage probe under a quota").
	storageWarm = 8
)

// measureStorage fetches some of the samples kept (ids, raws) at probeSplit
// and compares their storage CPU with the same work timed here: the
// storage CPU's speed, and the whole pipeline's cost on both sides. A
// Quick stage 1 fetches QuickSpeedSamples; otherwise the probe requests
// up to all the samples kept for storageSpan (ProbeStorage).
//
// transport is each agent's transport CPU, in cores, while the link probe
// filled the link (transportCores): it prices each probed sample as an
// epoch spends it (StorageProbe.contention).
func (cfg *Config) measureStorage(ctx context.Context, fs []Source, ids []uint64, raws map[uint64][]byte, transport []float64) (storageRates, error) {
	if cfg.Quick {
		ids = ids[:min(len(ids), QuickSpeedSamples)]
	}
	pr, err := ProbeStorage(ctx, cfg, fs, ids)
	if err != nil {
		return storageRates{}, err
	}
	pr.contention = map[uint64]float64{}
	for s, i := range pr.agent {
		if c := contention(fs[i].CPUs(), transport[i]); c > 0 {
			pr.contention[s] = c
		}
	}
	cfg.Log.Info().Floats64("transport_cores", transport).Msg("stage 1: storage transport while the link was full")
	return cfg.compareStorage(fs, pr, raws), nil
}

// QuickSpeedSamples is how many samples a Quick stage 1 fetches at probeSplit
// to measure the storage CPU.
const QuickSpeedSamples = speedSamples / 2

// StorageProbe is what the storage agents' CPU took for a few samples at
// split k (ProbeStorage).
type StorageProbe struct {
	ids []uint64
	k   int
	ns  map[uint64]int64 // storage_cpu_ns by sample
	// eff is each sample's effective storage CPU (effectiveNS).
	eff map[uint64]int64
	// agent is the index of the agent that served each sample.
	agent map[uint64]int
	// contention is, by sample, how much more of its agent's quota the
	// sample's ops take in an epoch than their thread CPU, with the
	// transport of a full link beside them (contention); a sample
	// without one is priced at its effective CPU.
	contention map[uint64]float64
}

// probeSplit is the split the storage probe asks for: just after the
// pipeline's crop where it has one (decode and the crop are most of the
// storage side's work, and the crop's output is a fraction of the whole
// pipeline's, a float tensor, which would hold the link for longer beside
// an epoch that uses it), else the whole pipeline.
func probeSplit(p *ops.Pipeline) int {
	if k, ok := p.CropSplit(); ok && k > 0 && k < p.Len() {
		return k
	}
	return p.Len()
}

// ProbeStorage fetches ids at split probeSplit from the storage agents fs
// (agent i the ids at positions i, i+len(fs), ...), storageWindow at a
// time, until each agent answered all of its ids or, once it had
// speedSamples of them, storageSpan passed; it keeps the storage CPU each
// sample took, for the comparison with the same work here
// (RunBeside).
func ProbeStorage(ctx context.Context, cfg *Config, fs []Source, ids []uint64) (StorageProbe, error) {
	k := probeSplit(cfg.Pipeline)
	full, err := cfg.probeAll(ctx, fs, ids, k, storageWindow, probeSpan{budget: storageSpan, least: speedSamples, warm: storageWarm}, 0, false)
	if err != nil {
		return StorageProbe{}, err
	}
	pr := StorageProbe{ids: ids, k: k, ns: map[uint64]int64{}, eff: map[uint64]int64{}, agent: map[uint64]int{}}
	for i, r := range full {
		_, share := workerShare(budgetOf(fs[i]))
		maps.Copy(pr.ns, r.storageNS)
		for s, ns := range r.storageNS {
			pr.eff[s] = effectiveNS(ns, r.budgetNS[s], share)
			pr.agent[s] = i
		}
	}
	return pr, nil
}

// compareStorage compares the storage CPU of pr's samples with the same
// work on raws timed here: the speed is the ratio of their sums of thread
// CPU (speedEstimate), with its relative standard error; the effective
// CPU (effectiveNS) is logged beside it.
func (cfg *Config) compareStorage(fs []Source, pr StorageProbe, raws map[uint64][]byte) storageRates {
	var local, remote, thread []float64
	var localSum, fullSum float64
	for _, id := range pr.ids {
		sns, ok := pr.ns[id]
		raw, have := raws[id]
		if !ok || !have {
			continue
		}
		key := ops.Key{Seed: cfg.Seed, Epoch: cfg.Epoch, Sample: id}
		part, full := localCost(cfg.Pipeline, key, raw, pr.k, cfg.Limits)
		if part <= 0 || sns <= 0 {
			continue // failed here or there: nothing to compare
		}
		local = append(local, float64(part))
		thread = append(thread, float64(sns))
		epochNS, _ := pr.epochNS(id)
		remote = append(remote, epochNS)
		localSum, fullSum = localSum+float64(part), fullSum+float64(full)
	}
	// NB: the speed divides thread CPU, not the effective CPU, although an
	// epoch spends the latter: the plan multiplies it into the profile's
	// op costs, recorded in a busy profiling epoch at 1.3-1.5x this
	// quiet, warm local timing, and the two biases cancel to within 15%
	// (docs/policy.md, "The storage probe under a quota"); the effective
	// CPU alone over-prices the storage side by up to 38%. Where a
	// measured profile is at hand the planner prices the probe against
	// its op costs instead (planner.Planner.ProbeSpeed).
	st := storageRates{probe: pr}
	st.speed, st.speedRSE = speedEstimate(local, thread)
	for _, f := range fs {
		st.cores += f.CPUs()
	}
	if n := len(local); n > 0 {
		st.localNS = fullSum / float64(n)
		// The probe ran ops[0:k] there: the whole pipeline takes the
		// storage side what it takes here in the same proportion.
		perSample := sum(thread) / float64(n) * fullSum / localSum
		if st.cores > 0 && perSample > 0 {
			st.rate = st.cores / (perSample / 1e9)
		}
		effSpeed, _ := speedEstimate(local, remote)
		cfg.Log.Info().Int("samples", n).Int("split", pr.k).
			Float64("storage_epoch_ns", sum(remote)/float64(n)).Float64("storage_thread_ns", sum(thread)/float64(n)).
			Float64("local_ns", localSum/float64(n)).Float64("speed", st.speed).Float64("speed_rse", st.speedRSE).
			Float64("effective_speed", effSpeed).Float64("median_speed", medianSpeed(local, thread)).
			Msg("stage 1: storage probe")
	}
	return st
}

// localCost is the thread CPU time here of ops[0:k] (part) and of the
// whole pipeline (full) on raw: the smaller of two runs each, so the first
// run's cold caches do not count. A run that fails costs 0 (SpeedRatio
// skips it).
func localCost(p *ops.Pipeline, key ops.Key, raw []byte, k int, lim oplimits.Settings) (part, full int64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	part, full = -1, -1
	for range 2 {
		t0 := cpuclock.Thread()
		v, err := p.RunLimited(key, ops.Encoded(raw), 0, k, lim.At(time.Now()))
		t1 := cpuclock.Thread()
		if err == nil && k < p.Len() {
			_, err = p.RunLimited(key, v, k, p.Len(), lim.At(time.Now()))
		}
		t2 := cpuclock.Thread()
		if err != nil {
			return 0, 0
		}
		if d := int64(t1 - t0); part < 0 || d < part {
			part = d
		}
		if d := int64(t2 - t0); full < 0 || d < full {
			full = d
		}
	}
	return part, full
}
