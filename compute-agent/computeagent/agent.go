package computeagent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/journal"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/trainer"
	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// The engine runs the planner's plans and stage 1 probes through the
// engine's fetchers; neither package imports the other.
var (
	_ engine.Plan    = (*planner.RunPlan)(nil)
	_ planner.Source = (*engine.Fetcher)(nil)
)

// The engine's errors (package engine), under the names the agent's
// callers match with errors.Is.
var (
	// ErrFingerprint: a storage agent serves a different dataset than the
	// catalog's.
	ErrFingerprint = engine.ErrFingerprint
	// ErrCatalog marks a malformed catalog stream.
	ErrCatalog = engine.ErrCatalog
	// ErrNoStorage: no storage agent can serve the epoch.
	ErrNoStorage = engine.ErrNoStorage
	// ErrUnavailable: samples of the epoch that no live storage agent
	// holds.
	ErrUnavailable = engine.ErrUnavailable
	// ErrContentMismatch: a storage agent sent raw bytes whose SHA-256 is
	// not the catalog's content hash for that sample. The agent is refused
	// for the rest of the run.
	ErrContentMismatch = engine.ErrContentMismatch
	// ErrSample is wrapped by the error of an epoch failed by a bad sample
	// (OnError "fail"); the error names the sample.
	ErrSample = engine.ErrSample
)

// Catalog is the dataset as a storage agent describes it (engine.Catalog).
type Catalog = engine.Catalog

// probeGrace is how long the start of an epoch waits for the storage
// agents still silent once one of them answered Info.
const probeGrace = 2 * time.Second

// Connection health checks: a ping after keepaliveTime without traffic
// (the storage agents accept one every storageagent.MinPingInterval = 10 s
// or slower, streams or not), and the connection is closed, failing its
// streams, when the ping is not answered within keepaliveTimeout. So a
// dead peer is detected within about 15 s even when no request is
// outstanding; a stalled stream with requests out is caught sooner by the
// stall timeout.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 5 * time.Second
)

// connectParams re-dial a lost storage agent quickly: gRPC's default
// back-off grows to 120 s, longer than a restart; ours stays at 1 s.
var connectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// ErrClosed: the agent was closed. It is journal.ErrClosed, so a batch
// journaled after Close fails with it too.
var ErrClosed = journal.ErrClosed

// Agent is a compute agent: it reads the catalog from the storage agents,
// then runs epochs. Ordering guarantee: each sample of this agent's shard
// is delivered exactly once per epoch; batches are formed in completion
// order (a slow sample does not hold back the batches behind it) unless
// Config.StrictOrder, which delivers in the epoch's permutation order.
type Agent struct {
	cfg      runConfig
	log      zerolog.Logger
	sizes    *schedule.SizeModel
	pipeID   string
	pipeSpec []byte           // sent on each stream's first request; nil for presets
	plan     *planner.RunPlan // Config.Plan, indexed
	gpu      GPUMonitor
	// tail is what the trainer client finishes on its device when slots
	// hold uint8 (the pipeline's trailing to_tensor and normalize); nil
	// otherwise.
	tail *trainer.Tail
	hub  *trainer.Hub // trainer mode, while Run serves
	m    *metrics
	// peer rate-limits and counts the warnings remote peers cause (TLS,
	// gossip, trainers, the metrics listener); its counters are in m.
	peer *peerlog.Limiter
	// engine is what every epoch's run takes from the agent.
	engine engine.Config

	mu        sync.Mutex
	discovery Discovery
	conns     map[string]*grpc.ClientConn
	cat       *Catalog
	// refusals holds the storage agents refused for the rest of the run
	// (engine.Refusals).
	refusals *engine.Refusals
	jr       *journal.Journal // the sample log and resume state, opened with the catalog
	jrErr    error
	// cache is the node's sample cache (Config.CacheDir), opened by the
	// first epoch; cachePtr holds it for the metrics.
	cache    *cache.Store
	cachePtr atomic.Pointer[cache.Store]
	closed   bool
}

// New validates cfg (filling in its zero values) and returns an agent. It
// does no I/O.
func New(cfg Config) (*Agent, error) { return NewWithKnobs(cfg, Knobs{}) }

// NewWithKnobs is [New] with test hooks.
func NewWithKnobs(cfg Config, k Knobs) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	peer := peerlog.New(peerlog.Options{})
	a := &Agent{
		cfg:    runConfig{Config: cfg, Knobs: k.withDefaults()},
		log:    cfg.Logger, // the binary names the component (internal/cli.Logger)
		sizes:  schedule.NewSizeModel(cfg.Pipeline),
		pipeID: cfg.Pipeline.ID(),
		plan:   planner.NewRunPlan(cfg.Plan, nil, policy.Resources{}),
		gpu:    cfg.GPU,
		conns:  map[string]*grpc.ClientConn{},
		peer:   peer,
	}
	a.m = newMetrics(append(peer.Collectors(), cache.Collectors(a.cachePtr.Load)...)...)
	a.discovery = cfg.Discovery
	if cfg.Trainer.Socket != "" && a.trainerDType() == "uint8" {
		p, tail, err := trainer.CutTail(cfg.Pipeline)
		if err != nil {
			return nil, configErr("%v", err)
		}
		a.cfg.Pipeline, a.tail = p, tail
		a.sizes, a.pipeID = schedule.NewSizeModel(p), p.ID()
	}
	if pre, err := ops.Preset(a.cfg.Pipeline.Name()); err != nil || pre.ID() != a.pipeID {
		if a.pipeSpec, err = json.Marshal(a.cfg.Pipeline.Spec()); err != nil {
			return nil, configErr("pipeline spec: %v", err)
		}
	}
	if a.gpu == nil {
		a.gpu = NewNVML(a.cfg.Clock, a.log)
	}
	a.refusals = &engine.Refusals{Log: a.log}
	a.engine = a.engineConfig()
	return a, nil
}

// engineConfig is the epoch engine's view of the agent.
func (a *Agent) engineConfig() engine.Config {
	c := &a.cfg
	return engine.Config{
		Log: a.log, Now: c.Clock.Now, Metrics: a.m, Warnings: a.peer, Refusals: a.refusals, Consumer: c.Consumer, OnSample: c.OnSample,
		Pipeline: c.Pipeline, PipelineID: a.pipeID, PipelineSpec: a.pipeSpec, Sizes: a.sizes, Seed: c.Seed, Codec: c.Codec,
		Workers: c.Workers, Queue: c.Queue, Batch: c.Batch, Window: c.Window, WindowBytes: c.WindowBytes,
		MaxPayload: c.MaxPayload, Retries: c.Retries, RetryBudget: c.RetryBudget, StallTimeout: c.StallTimeout,
		Progress: c.Progress, StrictOrder: c.StrictOrder, StrictOffload: c.StrictOffload, FetchOnly: c.FetchOnly,
		FailOnError: c.OnError == OnErrorFail, RoundRobin: c.Placement == PlacementRoundRobin, Limits: c.Settings,
	}
}

// assemblerMetrics are the trainers' assembler's series.
func (a *Agent) assemblerMetrics() *trainer.Metrics {
	m := a.m
	return &trainer.Metrics{Wait: m.wait, Batches: m.batches, Samples: m.samples}
}

// MetricsHandler serves GET /metrics and GET /healthz.
func (a *Agent) MetricsHandler() http.Handler { return a.m.handler() }

// Catalog returns the catalog once Run has read it, else nil.
func (a *Agent) Catalog() *Catalog {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cat
}

// Run joins the cluster when discovery is by gossip, runs Config.Epochs
// epochs and returns their reports. It stops early when ctx ends or an
// epoch fails, returning the reports of the epochs that completed. It
// leaves the cluster before it returns.
func (a *Agent) Run(ctx context.Context) ([]report.EpochReport, error) {
	if a.cfg.Insecure {
		a.log.Warn().Bool("tls", a.cfg.TLS.Enabled()).Msg("INSECURE (--insecure): without TLS the data is readable on the network " +
			"and any server can pose as a storage agent; without a gossip key anyone can join the cluster")
	}
	if a.cfg.Discovery == nil {
		node, err := a.join()
		if err != nil {
			return nil, err
		}
		defer node.Close()
		a.mu.Lock()
		a.discovery = MembershipDiscovery{Node: node, Min: a.cfg.MinStorage}
		a.mu.Unlock()
	}
	if a.cfg.MetricsAddr != "" {
		stop, err := a.serveMetrics()
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	src, stop, err := a.epochSource(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	next := func(int, uint64) epochOpts { return epochOpts{plan: a.plan} }
	if a.cfg.Policy != "" {
		if next, err = a.startPolicy(ctx); err != nil {
			return nil, err
		}
	}
	return a.runEpochs(ctx, src, next)
}

// runEpochs is the epoch loop, with or without a policy: it runs the
// epochs src yields, each with the options next gives it, and returns
// their reports. It skips an epoch the state dir says completed before a
// restart (Config.StateDir, which a policy run does not take). It stops at
// the first failed epoch (in trainer mode the failure goes to the ranks
// and the loop serves on) or when src has no more.
func (a *Agent) runEpochs(ctx context.Context, src epochSourceFunc, next func(i int, num uint64) epochOpts) ([]report.EpochReport, error) {
	var reports []report.EpochReport
	for i := 0; ; i++ {
		num, req, ok := src(ctx, i)
		if !ok {
			return reports, nil // in trainer mode: the agent was stopped
		}
		opts := next(i, num)
		opts.trainer = req
		r, err := report.EpochReport{}, opts.err
		if err == nil {
			r, err = a.runEpoch(ctx, num, opts)
		}
		if errors.Is(err, errEpochSkipped) {
			continue
		}
		if err != nil {
			if a.trainerFailed(ctx, req, err) {
				continue
			}
			if req != nil && ctx.Err() != nil {
				return reports, nil // the agent was stopped
			}
			return reports, err
		}
		reports = append(reports, r)
	}
}

// Close closes the connections to the storage agents. Safe twice.
func (a *Agent) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var errs []error
	for addr, c := range a.conns {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		}
	}
	a.conns = nil
	if err := a.jr.Close(); err != nil {
		errs = append(errs, fmt.Errorf("samples out: %w", err))
	}
	if a.cache != nil {
		errs = append(errs, a.cache.Close())
	}
	if c, ok := a.gpu.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// conn returns the cached client connection to addr, where storage agent
// member (from gossip; empty when unknown) listens.
func (a *Agent) conn(addr, member string) (*grpc.ClientConn, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	key := member + "@" + addr
	if c := a.conns[key]; c != nil {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if a.cfg.TLS.Enabled() {
		// The server name is left to grpc: the host of addr.
		tc, err := a.cfg.TLS.Client(tlsconf.Expect{Cluster: a.cfg.Cluster, Role: tlsconf.RoleStorage, Name: member})
		if err != nil {
			return nil, configErr("tls: %v", err)
		}
		creds = tlsconf.Credentials(tc, tlsconf.LogRejects(a.peer, a.log.With().Str("storage", addr).Logger()))
	}
	maxMsg := a.cfg.MaxPayload
	if maxMsg == 0 {
		maxMsg = wireform.DefaultMaxPayload
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(a.cfg.Dial),
		// A storage agent that stops answering (host down, link cut) fails
		// the stream, whose requests are then retried elsewhere.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(connectParams),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg + 1<<20)),
	}
	if w := a.cfg.RecvWindow; w > 0 {
		opts = append(opts, grpc.WithInitialWindowSize(int32(w)), grpc.WithInitialConnWindowSize(int32(2*w)))
	}
	c, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("computeagent: %s: %w", addr, err)
	}
	a.conns[key] = c
	return c, nil
}

// storage discovers the storage agents, reads the catalog on first use
// and keeps the agents whose dataset fingerprint matches it. It asks every
// agent for its Info at once; once one answered it waits at most
// probeGrace for the rest (a stopped agent does not hold the epoch; the
// ones left out are asked again at the next epoch). When none is usable it
// tries again, with back-off, until Config.RetryBudget is spent.
func (a *Agent) storage(ctx context.Context) ([]*engine.Fetcher, *Catalog, error) {
	start := a.cfg.Clock.Now()
	for attempt := 1; ; attempt++ {
		fs, cat, retry, err := a.storageOnce(ctx)
		if err == nil {
			return fs, cat, nil
		}
		idle := a.cfg.Clock.Now().Sub(start)
		if !retry || ctx.Err() != nil || idle >= a.cfg.RetryBudget {
			return nil, nil, err
		}
		a.log.Warn().Err(err).Int("attempt", attempt).Msg("no storage agent usable yet; retrying")
		if err := schedule.Pause(ctx, min(schedule.RetryDelay(attempt), a.cfg.RetryBudget-idle), nil); err != nil {
			return nil, nil, err
		}
	}
}

// probed is one storage agent's answer to Info.
type probed struct {
	i      int
	client dataplanepb.StorageClient
	info   *dataplanepb.InfoResponse
	err    error
}

// storageOnce is one round of storage; retry reports whether another
// round may help (not when every agent serves another dataset).
func (a *Agent) storageOnce(ctx context.Context) (fs []*engine.Fetcher, _ *Catalog, retry bool, _ error) {
	a.mu.Lock()
	d := a.discovery
	a.mu.Unlock()
	if d == nil {
		return nil, nil, false, fmt.Errorf("%w: not joined to the cluster", ErrNoStorage)
	}
	eps, err := d.Storage(ctx)
	if err != nil {
		return nil, nil, ctx.Err() == nil, fmt.Errorf("computeagent: discovery: %w", err)
	}
	slices.SortFunc(eps, func(x, y Endpoint) int { return cmp.Compare(x.Name, y.Name) })
	retry = len(eps) == 0
	got, err := a.probeInfo(ctx, eps)
	if err != nil {
		return nil, nil, false, err
	}
	var errs []error
	for i, ep := range eps {
		f, again, err := a.accept(ctx, ep, got[i])
		if err != nil {
			errs = append(errs, err)
			retry = retry || again
			continue
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		errs = append(errs, fmt.Errorf("%d discovered", len(eps)))
		return nil, nil, retry, fmt.Errorf("%w: %w", ErrNoStorage, errors.Join(errs...))
	}
	return fs, a.Catalog(), false, nil
}

// probeInfo asks every endpoint for its Info at once and returns the
// answers by endpoint: nil for one that had not answered within
// probeGrace of the first answer.
func (a *Agent) probeInfo(ctx context.Context, eps []Endpoint) ([]*probed, error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan probed, len(eps))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, ep := range eps {
		wg.Go(func() {
			c, err := a.conn(ep.Addr, ep.Member)
			if err != nil {
				results <- probed{i: i, err: err}
				return
			}
			client := a.refusals.Guard(ep.Name, dataplanepb.NewStorageClient(c))
			ictx, icancel := context.WithTimeout(pctx, engine.ProbeTimeout)
			info, err := client.Info(ictx, &dataplanepb.InfoRequest{}, grpc.WaitForReady(true))
			icancel()
			results <- probed{i: i, client: client, info: info, err: err}
		})
	}
	got := make([]*probed, len(eps))
	var grace <-chan time.Time
	for range eps {
		select {
		case p := <-results:
			got[p.i] = &p
			if p.err == nil && grace == nil {
				t := time.NewTimer(probeGrace)
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			return got, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return got, nil
}

// accept checks storage agent ep's answer p (nil: none in time) against
// the catalog, reading the catalog from it on first use, and returns its
// fetcher; retry reports whether another round may help with it.
func (a *Agent) accept(ctx context.Context, ep Endpoint, p *probed) (_ *engine.Fetcher, retry bool, _ error) {
	if err := a.refusals.Refusal(ep.Name); err != nil {
		return nil, false, err
	}
	if p == nil {
		a.log.Warn().Str("storage", ep.Name).Msg("storage agent slow to answer: left out of this epoch")
		return nil, true, fmt.Errorf("%s: info: no answer within %v of the first", ep.Name, probeGrace)
	}
	if p.err != nil {
		a.log.Warn().Err(p.err).Str("storage", ep.Name).Msg("storage agent unreachable")
		return nil, true, fmt.Errorf("%s: info: %w", ep.Name, p.err)
	}
	fp := p.info.GetFingerprint()
	if ep.Fingerprint != "" && ep.Fingerprint != fp {
		err := fmt.Errorf("%w: %s announced %q, serves %q", ErrFingerprint, ep.Name, ep.Fingerprint, fp)
		a.log.Error().Err(err).Msg("storage agent refused")
		return nil, false, err
	}
	cat := a.Catalog()
	if cat == nil {
		cctx, ccancel := context.WithTimeout(ctx, a.cfg.RetryBudget)
		c, err := engine.ReadCatalog(cctx, p.client)
		ccancel()
		if err != nil {
			return nil, !errors.Is(err, ErrCatalog), fmt.Errorf("%s: catalog: %w", ep.Name, err)
		}
		cat = c
		a.mu.Lock()
		a.cat = cat
		a.mu.Unlock()
		a.log.Info().Str("storage", ep.Name).Str("fingerprint", cat.Fingerprint).Uint64("samples", cat.Total).Msg("catalog read")
	}
	if fp != cat.Fingerprint {
		err := fmt.Errorf("%w: %s serves %q, catalog is %q", ErrFingerprint, ep.Name, fp, cat.Fingerprint)
		a.log.Error().Err(err).Msg("storage agent refused")
		return nil, false, err
	}
	f, err := engine.NewFetcher(ep.Name, p.client, p.info, cat)
	if err != nil {
		a.log.Error().Err(err).Msg("storage agent refused")
		return nil, false, err
	}
	return f, false, nil
}

// RunEpoch runs one epoch with Config.Plan and returns its report (also
// appended to Config.ReportPath). It does not consult Config.Policy.
func (a *Agent) RunEpoch(ctx context.Context, num uint64) (report.EpochReport, error) {
	return a.runEpoch(ctx, num, epochOpts{plan: a.plan})
}

// epochOpts are what a policy run changes about one epoch.
type epochOpts struct {
	// Opts are the engine's; runEpochOnce sets its Plan to plan.
	engine.Opts
	// plan is the epoch's plan.
	plan *planner.RunPlan
	// annotate, when set, completes a successful epoch's report before it
	// is logged and written.
	annotate func(*report.EpochReport, *engine.Epoch) error
	// trainer, when set, is the epoch the local trainer ranks asked for:
	// the epoch runs their orders and fills their slots.
	trainer *trainer.EpochReq
	// started, when set, is called once the epoch is prepared, before it
	// runs, with a context that ends when the epoch failed and a channel
	// closed when its run ended; the function it returns is waited for
	// then, before the epoch's report is completed (a policy run's stage
	// 1 beside its first epoch: planner/overlap.go).
	started func(ctx context.Context, e *engine.Epoch, ended <-chan struct{}) (wait func())
	// err, when set, fails the epoch before it starts (a plan that could
	// not be made).
	err error
}

// errEpochSkipped: the state dir says the epoch completed before a
// restart.
var errEpochSkipped = errors.New("computeagent: epoch completed before the restart")

// runEpoch runs one epoch. A failed or interrupted epoch's report is
// written too, with its status and error.
func (a *Agent) runEpoch(ctx context.Context, num uint64, opts epochOpts) (report.EpochReport, error) {
	began := a.cfg.Clock.Now()
	if t := opts.trainer; t != nil && t.Asked > 0 && t.Asked < began.UnixNano() {
		began = time.Unix(0, t.Asked) // the ranks asked while the agent was busy (stage 1)
	}
	r, err := a.runEpochOnce(ctx, num, began, opts)
	if err == nil || errors.Is(err, errEpochSkipped) {
		return r, err
	}
	r.Epoch, r.Status, r.Error = num, "failed", err.Error()
	if r.StartUnixNS == 0 { // failed before its first request: all of it was waiting
		r.StartWaitSeconds = a.cfg.Clock.Now().Sub(began).Seconds()
	}
	if ctx.Err() != nil {
		r.Status = "interrupted"
	}
	if r.Pipeline == "" {
		r.Pipeline, r.Plan = a.pipeID, opts.plan.Name()
	}
	if r.Failed == nil {
		r.Failed = []report.SampleFailure{}
	}
	a.log.Error().Err(err).Uint64("epoch", num).Str("status", r.Status).Msg("epoch failed")
	if a.cfg.ReportPath != "" {
		if werr := report.Append(a.cfg.ReportPath, r); werr != nil {
			err = errors.Join(err, fmt.Errorf("computeagent: report: %w", werr))
		}
	}
	return r, err
}

// openJournal opens the sample log and resume state once the catalog is
// known (its fingerprint is part of the run's identity).
func (a *Agent) openJournal(cat *Catalog, plan *planner.RunPlan) (*journal.Journal, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.jr != nil || a.jrErr != nil || (a.cfg.SamplesOut == "" && a.cfg.StateDir == "") {
		return a.jr, a.jrErr
	}
	if a.closed {
		return nil, ErrClosed
	}
	a.jr, a.jrErr = journal.Open(a.cfg.SamplesOut, a.cfg.StateDir, journal.RunState{
		Seed: a.cfg.Seed, Fingerprint: cat.Fingerprint, Pipeline: a.pipeID, Plan: plan.Name(),
		Rank: a.cfg.Rank, World: a.cfg.World, FirstEpoch: a.cfg.FirstEpoch, FetchOnly: a.cfg.FetchOnly,
	})
	if a.jrErr != nil {
		a.jrErr = fmt.Errorf("computeagent: samples out: %w", a.jrErr)
	}
	return a.jr, a.jrErr
}

// runEpochOnce runs one epoch in named steps: find the storage agents,
// decide the shard, prepare the epoch's run, run it, and finish its
// report.
func (a *Agent) runEpochOnce(ctx context.Context, num uint64, began time.Time, opts epochOpts) (report.EpochReport, error) {
	fs, cat, err := a.storage(ctx)
	if err != nil {
		return report.EpochReport{}, err
	}
	jr, err := a.openJournal(cat, opts.plan)
	if err != nil {
		return report.EpochReport{}, err
	}
	if c, err := a.openCache(); err != nil {
		return report.EpochReport{}, err
	} else if c != nil {
		defer c.Flush() // the index; entries are written as they come
	}
	if jr.Complete(num) {
		a.log.Info().Uint64("epoch", num).Msg("epoch completed before the restart: skipped")
		return report.EpochReport{}, errEpochSkipped
	}
	sh, err := a.shard(num, cat, jr, opts)
	if err != nil {
		return report.EpochReport{}, err
	}
	eo := opts.Opts
	eo.Plan = opts.plan
	e := engine.NewEpoch(&a.engine, num, cat, sh.Shard, eo)
	if sh.tr != nil {
		asm := a.newAssembler(e, sh, opts.trainer)
		e.Feed(asm, sh.tr)
		if err := a.hub.Start(asm); err != nil {
			return report.EpochReport{}, err
		}
		defer a.hub.Finish()
	}
	if err := e.Prepare(fs, jr); err != nil {
		return report.EpochReport{}, err
	}
	wait, ended := func() {}, make(chan struct{})
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opts.started != nil {
		wait = opts.started(sctx, e, ended)
	}
	r, err := a.execute(ctx, e, fs)
	if err != nil {
		cancel()
	}
	close(ended)
	wait()
	if r.StartUnixNS != 0 {
		r.StartWaitSeconds = max(0, time.Unix(0, r.StartUnixNS).Sub(began).Seconds())
		if r.FirstBatchSeconds > 0 {
			r.FirstBatchSeconds += r.StartWaitSeconds
		}
	}
	if err != nil {
		return r, err
	}
	return a.finish(r, e, jr, opts)
}

// epochShard is what one epoch delivers here.
type epochShard struct {
	engine.Shard
	tr *trainer.Positions // trainer mode: the local ranks' positions
}

// shard decides the epoch's positions (the rank's order, or the local
// trainer ranks'), less what the journal says was delivered, and each
// position's split under opts.plan.
func (a *Agent) shard(num uint64, cat *Catalog, jr *journal.Journal, opts epochOpts) (epochShard, error) {
	cfg := &a.cfg
	var sh epochShard
	if opts.trainer != nil {
		tr, err := a.trainerOrder(opts.trainer, cat)
		if err != nil {
			return sh, err
		}
		sh.tr, sh.Order = tr, tr.Order
	} else {
		// Every rank the same count (DDP hangs on uneven ones): padded by
		// repeats of its own samples, or with --drop-last cut to full
		// batches; with one rank, the whole catalog.
		sh.Order = schedule.RankOrder(cfg.Seed, num, cfg.Rank, cfg.World, cat.Total, cfg.Batch, cfg.Trainer.DropLast)
	}
	sh.Padded = max(0, len(sh.Order)-len(schedule.Order(cfg.Seed, num, cfg.Rank, cfg.World, cat.Total)))
	if done := jr.Delivered(num); len(done) > 0 {
		// Resume: the samples journaled before the restart were delivered;
		// the rest keep their order.
		sh.Order = slices.DeleteFunc(slices.Clone(sh.Order), func(s uint64) bool { _, ok := done[s]; return ok })
		sh.Resumed = len(done)
		a.log.Info().Uint64("epoch", num).Int("resumed", sh.Resumed).Int("left", len(sh.Order)).Msg("resuming the epoch")
	}
	sh.Split = make([]int, len(sh.Order))
	splitOf := a.splitOf(opts.plan)
	for i, s := range sh.Order {
		k, err := splitOf(s)
		if err != nil {
			return sh, err
		}
		sh.Split[i] = k
	}
	return sh, nil
}

// splitOf is each sample's split under plan as this agent runs it: a plan
// names splits of the whole pipeline; with uint8 slots the trainer runs
// its tail, so a split past the agent's part is cut back.
func (a *Agent) splitOf(plan *planner.RunPlan) func(sample uint64) (int, error) {
	p := a.cfg.Pipeline
	n := p.Len()
	if a.tail != nil {
		n++
		if a.tail.Normalize != nil {
			n++
		}
	}
	return func(s uint64) (int, error) {
		k, err := plan.Split(s, p, n)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return min(k, p.Len()), nil
	}
}

// execute runs the prepared epoch e over fs, sampling the GPU meanwhile,
// and returns its account so far; err is the run's.
func (a *Agent) execute(ctx context.Context, e *engine.Epoch, fs []*engine.Fetcher) (report.EpochReport, error) {
	gctx, stopGPU := context.WithCancel(ctx)
	var gpu report.GPUStats
	var wg sync.WaitGroup
	wg.Go(func() { gpu = a.gpu.Sample(gctx) })
	a.m.cur.Store(e)
	defer a.m.cur.Store(nil)
	err := e.Execute(ctx, fs)
	stopGPU()
	wg.Wait()
	r := e.Report(ctx, fs, err == nil)
	r.GPU = gpu
	return r, err
}

// finish checks that the epoch accounted for every position, completes
// its report (opts.annotate), logs and writes it and records the epoch
// done in the journal.
func (a *Agent) finish(r report.EpochReport, e *engine.Epoch, jr *journal.Journal, opts epochOpts) (report.EpochReport, error) {
	if r.Samples+r.SamplesFailed != r.Shard {
		return r, fmt.Errorf("computeagent: epoch %d: delivered %d and failed %d of %d samples", r.Epoch, r.Samples, r.SamplesFailed, r.Shard)
	}
	if opts.annotate != nil {
		if err := opts.annotate(&r, e); err != nil {
			return r, err
		}
	}
	a.m.epochs.Inc()
	a.log.Info().Uint64("epoch", r.Epoch).Float64("seconds", r.Seconds).Int("samples", r.Samples).
		Int("failed", r.SamplesFailed).Int64("bytes", r.BytesReceived).Float64("gpu_idle", r.GPUIdleFraction).Msg("epoch done")
	if a.cfg.ReportPath != "" {
		if err := report.Append(a.cfg.ReportPath, r); err != nil {
			return r, fmt.Errorf("computeagent: report: %w", err)
		}
	}
	if err := jr.EpochDone(r.Epoch); err != nil {
		return r, fmt.Errorf("computeagent: state dir: %w", err)
	}
	return r, nil
}

// serveMetrics serves /metrics and /healthz on Config.MetricsAddr until
// stop.
func (a *Agent) serveMetrics() (stop func(), err error) {
	lis, err := net.Listen("tcp", a.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("computeagent: metrics listen: %w", err)
	}
	srv := &http.Server{Handler: a.m.handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: peerlog.StdLogger(a.peer, a.log, peerlog.MetricsHTTPError)}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error().Err(err).Msg("metrics server failed")
		}
	})
	a.log.Info().Str("addr", lis.Addr().String()).Msg("serving /metrics and /healthz")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		wg.Wait()
	}, nil
}
