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
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/journal"
	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/compute-agent/planner/stage1"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/trainer"
	"github.com/sophon-dl/sophon/internal/grpcbuf"
	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// The engine runs the planner's plans and stage 1 probes through the
// engine's fetchers; neither package imports the other.
var (
	_ engine.Plan   = (*planner.RunPlan)(nil)
	_ stage1.Source = (*engine.Fetcher)(nil)
)

// The engine's and the catalog's errors (packages engine and catalog),
// under the names the agent's callers match with errors.Is.
var (
	// ErrFingerprint: a storage agent serves a different dataset than the
	// catalog's.
	ErrFingerprint = catalog.ErrFingerprint
	// ErrCatalog marks a malformed catalog stream.
	ErrCatalog = catalog.ErrCatalog
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
	conns     map[connKey]*grpc.ClientConn
	// tcp holds each storage agent's sockets, by member@addr (its
	// connections' connKey.base; tcpinfo.Conns: the engine reads their
	// TCP_INFO), and links what
	// the engine measured of it for the next epoch (linkwatch.Memory).
	tcp   map[string]*tcpinfo.Conns
	links map[string]*linkwatch.Memory
	// path is the round trip and loss to the storage agents as last
	// measured (notePath), which the auto connection count sizes for.
	path pathMemo
	cat  *catalog.Catalog
	// refusals holds the storage agents refused for the rest of the run
	// (catalog.Refusals).
	refusals *catalog.Refusals
	// jr is the sample log and resume state and cache the node's cache,
	// each opened by the first epoch that needs it (engine.Run).
	jr     *journal.Lazy
	cache  *cache.Lazy
	closed bool
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
		conns:  map[connKey]*grpc.ClientConn{},
		tcp:    map[string]*tcpinfo.Conns{},
		links:  map[string]*linkwatch.Memory{},
		peer:   peer,
	}
	a.jr = &journal.Lazy{Samples: cfg.SamplesOut, Dir: cfg.StateDir,
		Run: journal.RunState{Seed: cfg.Seed, Rank: cfg.Rank, World: cfg.World, FirstEpoch: cfg.FirstEpoch, FetchOnly: cfg.FetchOnly}}
	a.cache = &cache.Lazy{Options: cache.Options{Dir: cfg.CacheDir, Bytes: int64(cfg.CacheBytes), Policy: cfg.CachePolicy,
		MaxPayload: int64(cfg.MaxPayload), KeyFile: cfg.CacheKeyFile, Build: k.CacheBuild, Log: cfg.Logger}, DefaultBuild: cacheBuild}
	a.m = newMetrics(append(peer.Collectors(), cache.Collectors(a.cache.Store)...)...)
	a.discovery = cfg.Discovery
	if cfg.Trainer.Socket != "" && a.trainerDType() == "uint8" {
		p, tail, err := trainer.CutTail(cfg.Pipeline)
		if err != nil {
			return nil, configErr("%v", err)
		}
		a.cfg.Pipeline, a.tail = p, tail
		a.sizes, a.pipeID = schedule.NewSizeModel(p), p.ID()
	}
	a.jr.Run.Pipeline = a.pipeID
	if a.cfg.Job == "" {
		a.cfg.Job = defaultJob(a.cfg.Seed, a.cfg.FirstEpoch, a.cfg.World, a.pipeID)
	}
	if pre, err := ops.Preset(a.cfg.Pipeline.Name()); err != nil || pre.ID() != a.pipeID {
		if a.pipeSpec, err = json.Marshal(a.cfg.Pipeline.Spec()); err != nil {
			return nil, configErr("pipeline spec: %v", err)
		}
	}
	if a.gpu == nil {
		a.gpu = NewNVML(a.cfg.Clock, a.log)
	}
	a.refusals = &catalog.Refusals{Log: a.log}
	a.engine = a.engineConfig()
	return a, nil
}

// engineConfig is the epoch engine's view of the agent.
func (a *Agent) engineConfig() engine.Config {
	c := &a.cfg
	return engine.Config{
		Log: a.log, Now: c.Clock.Now, Metrics: a.m, Warnings: a.peer, Refusals: a.refusals, Consumer: c.Consumer, OnSample: c.OnSample,
		Pipeline: c.Pipeline, PipelineID: a.pipeID, PipelineSpec: a.pipeSpec, Sizes: a.sizes, Seed: c.Seed, Codec: c.Codec,
		Workers: c.Workers, Queue: c.Queue, Batch: c.Batch, Window: c.Window, WindowBytes: c.WindowBytes, RecvWindow: c.RecvWindow,
		MaxPayload: c.MaxPayload, Retries: c.Retries, RetryBudget: c.RetryBudget, StallTimeout: c.StallTimeout,
		Progress: c.Progress, StrictOrder: c.StrictOrder, StrictOffload: c.StrictOffload, FetchOnly: c.FetchOnly,
		FailOnError: c.OnError == OnErrorFail, RoundRobin: c.Placement == PlacementRoundRobin, Limits: c.Settings,
		Journal: a.jr, Cache: a.cache, ReportPath: c.ReportPath, Rank: c.Rank, World: c.World, DropLast: c.Trainer.DropLast, TailOps: a.tail.Len(),
		Trainer: &trainer.Metrics{Wait: a.m.wait, Batches: a.m.batches, Samples: a.m.samples}, GPU: a.gpu,
	}
}

// MetricsHandler serves GET /metrics and GET /healthz.
func (a *Agent) MetricsHandler() http.Handler { return a.m.handler() }

// Catalog returns the catalog once Run has read it, else nil.
func (a *Agent) Catalog() *catalog.Catalog {
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
	next := func(int, uint64) epochOpts { return epochOpts{Opts: engine.Opts{Plan: a.plan}} }
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
		if errors.Is(err, engine.ErrSkipped) {
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

// Close tells the storage agents that this job is leaving (so that the
// jobs that remain get its share of their budgets at once) and closes the
// connections to them. Safe twice.
func (a *Agent) Close() error {
	a.leave()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var errs []error
	for k, c := range a.conns {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
		}
	}
	a.conns = nil
	if err := a.jr.Close(); err != nil {
		errs = append(errs, fmt.Errorf("samples out: %w", err))
	}
	errs = append(errs, a.cache.Close())
	if c, ok := a.gpu.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// leaveTimeout bounds the Info that tells a storage agent the job is
// leaving: best effort, since an agent that does not hear it lets the job
// go a job window after its last request.
const leaveTimeout = time.Second

// leave tells each storage agent the agent has a connection to that the
// job is leaving (InfoRequest.leaving), all at once, each within
// leaveTimeout. A rank of a job of several (Config.World > 1) says
// nothing: the job is the ranks together, and one rank's leaving would
// drop it from the shares between the others' epochs; such a job leaves
// a job window after its last rank's last request.
func (a *Agent) leave() {
	if a.cfg.World > 1 {
		return
	}
	a.mu.Lock()
	var cs []*grpc.ClientConn
	if !a.closed {
		for k, c := range a.conns {
			if k.i == 0 { // one per agent: its first connection
				cs = append(cs, c)
			}
		}
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
			defer cancel()
			if _, err := dataplanepb.NewStorageClient(c).Info(ctx, &dataplanepb.InfoRequest{Leaving: true}); err != nil {
				a.log.Debug().Err(err).Str("storage", c.Target()).Msg("leaving: not told")
			}
		})
	}
	wg.Wait()
}

// connKey names a cached connection: its storage agent (member@addr)
// and its number (0: the first).
type connKey struct {
	base string
	i    int
}

func (k connKey) String() string {
	if k.i == 0 {
		return k.base
	}
	return k.base + "#" + strconv.Itoa(k.i)
}

// conn returns the cached client connection number i (0: the first) to
// addr, where storage agent member (from gossip; empty when unknown)
// listens. Each number is a ClientConn of its own, so a TCP connection
// of its own (Config.Conns); they share the dial options.
func (a *Agent) conn(addr, member string, i int) (*grpc.ClientConn, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	base := member + "@" + addr
	key := connKey{base, i}
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
	// The agent's connections share one set of sockets (TCP_INFO summed
	// over them) and one link memory.
	socks := a.tcp[base]
	if socks == nil {
		socks = &tcpinfo.Conns{}
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(a.dialer(addr, socks)),
		// A storage agent that stops answering (host down, link cut) fails
		// the stream, whose requests are then retried elsewhere.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(connectParams),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg + 1<<20)),
		grpcbuf.DialOption(),
	}
	if w := a.cfg.RecvWindow; w > 0 {
		opts = append(opts, grpc.WithInitialWindowSize(int32(w)), grpc.WithInitialConnWindowSize(int32(2*w)))
	}
	opts = append(opts, jobOptions(a.cfg.Job)...)
	c, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("computeagent: %s: %w", addr, err)
	}
	a.conns[key] = c
	if a.tcp[base] == nil {
		a.tcp[base] = socks
		a.links[base] = &linkwatch.Memory{}
	}
	return c, nil
}

// tcpConns is the sockets of the connection to addr, where storage agent
// member listens, and the link's memory (nil before conn made them).
func (a *Agent) tcpConns(addr, member string) (*tcpinfo.Conns, *linkwatch.Memory) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tcp[member+"@"+addr], a.links[member+"@"+addr]
}

// dialer is the dialer of the connection to storage agent addr: Knobs.Dial,
// then Config.TCPCongestion set on the socket (before TLS's first bytes),
// which socks then tracks for its TCP_INFO. A congestion control that
// cannot be set (New checked the name) is logged, and the connection used
// with the host's.
func (a *Agent) dialer(addr string, socks *tcpinfo.Conns) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, target string) (net.Conn, error) {
		c, err := a.cfg.Dial(ctx, target)
		if err != nil {
			return nil, err
		}
		if err := tcpinfo.SetCongestion(c, a.cfg.TCPCongestion); err != nil {
			a.log.Warn().Err(err).Str("storage", addr).Msg("congestion control not set; the host's default stays")
		}
		return socks.Track(c), nil
	}
}

// connsFunc is how many connections an epoch stripes over to the storage
// agent that answered Info with info, whose first connection's kernel
// measured a least round trip of rtt (0: unknown).
type connsFunc func(info *dataplanepb.InfoResponse, rtt time.Duration) int

// storage discovers the storage agents, reads the catalog on first use
// and keeps the agents whose dataset fingerprint matches it, each with
// conns(its Info) connections (nil: one). It asks every
// agent for its Info at once; once one answered it waits at most
// probeGrace for the rest (a stopped agent does not hold the epoch; the
// ones left out are asked again at the next epoch). When none is usable it
// tries again, with back-off, until Config.RetryBudget is spent.
func (a *Agent) storage(ctx context.Context, conns connsFunc) ([]*engine.Fetcher, *catalog.Catalog, error) {
	start := a.cfg.Clock.Now()
	for attempt := 1; ; attempt++ {
		fs, cat, retry, err := a.storageOnce(ctx, conns)
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
func (a *Agent) storageOnce(ctx context.Context, conns connsFunc) (fs []*engine.Fetcher, _ *catalog.Catalog, retry bool, _ error) {
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
		f, again, err := a.accept(ctx, ep, got[i], conns)
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
			c, err := a.conn(ep.Addr, ep.Member, 0)
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
// fetcher over conns(p.info) connections; retry reports whether another
// round may help with it.
func (a *Agent) accept(ctx context.Context, ep Endpoint, p *probed, conns connsFunc) (_ *engine.Fetcher, retry bool, _ error) {
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
		c, err := catalog.ReadCatalog(cctx, p.client)
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
	socks, mem := a.tcpConns(ep.Addr, ep.Member)
	f.SetTCP(socks, mem)
	if conns == nil {
		return f, false, nil
	}
	var rtt time.Duration
	if socks != nil {
		if ti, _, err := socks.Read(); err == nil {
			rtt = ti.MinRTT
		}
	}
	n := min(conns(p.info, rtt), linkwatch.MaxConns)
	for i := 1; i < n; i++ {
		c, err := a.conn(ep.Addr, ep.Member, i)
		if err != nil {
			return nil, false, err
		}
		// Dial now, not at the stripe's first request: over a long round
		// trip the TCP and TLS handshakes take three of them.
		c.Connect()
		f.Stripe(a.refusals.Guard(ep.Name, dataplanepb.NewStorageClient(c)))
	}
	return f, false, nil
}

// epochConns is the connections per storage agent of an epoch with
// options o: Config.Conns, or when that is 0 (auto) one to an agent that
// sends by a rate-based congestion control (bbr: its Info's
// tcp_congestion, linkwatch.RateBased), else linkwatch.AutoConns of
// the link's rate (the planner's, or the agent's announced egress rate,
// the higher) and the path's round trip and loss as last measured (stage
// 1's probe, then each epoch's readings: pathMemo). Before the loss is
// measured (a run's first epoch) that is linkwatch.FirstConns of the
// agent's announced egress rate (a rate measured so far may be one
// loss-held connection's) and the least round trip the first
// connection's kernel measured (none where TCP_INFO is unavailable: one
// connection): a long round trip stripes from the start, as if it lost
// linkwatch.PriorLoss. On a path without loss that is one connection. A
// rate measured over connections that loss held near their ceiling says
// nothing of the link's (it is theirs), so after such an epoch the rate
// counts as unknown: as many connections as AutoConns allows; after one
// that the link held, no fewer than it used, lossy path or not: they
// filled the link, and each connection's congestion control has learnt
// its share of it (one bbr connection left of eight starts the next
// epoch at an eighth of the link and takes seconds to grow at 80 ms).
func (a *Agent) epochConns(o engine.Opts) connsFunc {
	return func(info *dataplanepb.InfoResponse, connRTT time.Duration) int {
		if a.cfg.Conns > 0 {
			return a.cfg.Conns
		}
		if linkwatch.RateBased(info.GetTcpCongestion()) {
			// Loss does not hold one bbr connection below the link's
			// rate, and several to one agent compete with each other:
			// on a lossless 80-ms path eight carried 3-8% less than one
			// (docs/results/wan.md).
			return 1
		}
		p := a.path.load()
		if !p.lossKnown {
			// A rate measured so far may be what one connection held by
			// loss carried: only the storage agent's announced egress
			// rate says what the link is. The round trip is the kernel's
			// (a timed RPC's includes the agents' own delays).
			return linkwatch.FirstConns(float64(info.GetEgressBytesPerSec()), connRTT)
		}
		rate := max(o.LinkRate, float64(info.GetEgressBytesPerSec()))
		if p.held && info.GetEgressBytesPerSec() == 0 {
			rate = 0
		}
		return max(linkwatch.AutoConns(rate, p.rtt, p.loss, 0), min(p.used, linkwatch.MaxConns))
	}
}

// pathMemo is the round trip and loss rate of the link to the storage
// agents as last measured, and what the last epoch's connections did.
type pathMemo struct {
	mu sync.Mutex
	pathState
}

// pathState is a pathMemo's content.
type pathState struct {
	// rtt is the least round trip last measured (0: unknown) and loss the
	// loss rate, measured when lossKnown.
	rtt       time.Duration
	loss      float64
	lossKnown bool
	// held is whether loss held the last epoch's connections.
	held bool
	// used is the connections of the last epoch the link held (0: none).
	used int
}

// note keeps what l measured: its least round trip (the mean where the
// least is unknown) and its loss where a storage agent reported its end
// (report.Link.LossKnown). A reading without them changes nothing.
func (m *pathMemo) note(l *report.Link) {
	if l == nil {
		return
	}
	rtt := time.Duration(l.MinRTTSeconds * 1e9)
	if rtt <= 0 {
		rtt = time.Duration(l.RTTSeconds * 1e9)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if rtt > 0 {
		m.rtt = rtt
	}
	if l.LossKnown {
		m.loss, m.lossKnown = l.Loss, true
	}
}

// noteEpoch notes r's link and whether loss held its connections: its
// rate (bytes received over its seconds) was at least half of what the
// connections it used carry at most on the path (linkwatch.AutoConns at
// twice the rate asks for more of them), so that the link may be faster.
func (m *pathMemo) noteEpoch(r *report.EpochReport) {
	m.note(r.Link)
	if r.Seconds <= 0 || r.BytesReceived <= 0 {
		return
	}
	used := 0
	for _, s := range r.ByStorage {
		used += max(s.Conns, 1)
	}
	p := m.load()
	held := used > 0 && linkwatch.AutoConns(2*float64(r.BytesReceived)/r.Seconds, p.rtt, p.loss, 0) > used
	m.mu.Lock()
	m.held = held
	if !held {
		m.used = used
	}
	m.mu.Unlock()
}

// load is what m holds now.
func (m *pathMemo) load() pathState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pathState
}

// RunEpoch runs one epoch with Config.Plan and returns its report (also
// appended to Config.ReportPath). It does not consult Config.Policy.
func (a *Agent) RunEpoch(ctx context.Context, num uint64) (report.EpochReport, error) {
	return a.runEpoch(ctx, num, epochOpts{Opts: engine.Opts{Plan: a.plan}})
}

// epochOpts are what a policy run changes about one epoch.
type epochOpts struct {
	// Opts are the engine's: the epoch's plan and the policy run's hooks.
	engine.Opts
	// trainer, when set, is the epoch the local trainer ranks asked for:
	// the epoch runs their orders and fills their slots.
	trainer *trainer.EpochReq
	// err, when set, fails the epoch before it starts (a plan that could
	// not be made).
	err error
}

// runEpoch runs one epoch on the storage agents it finds for it:
// package engine runs it from its shard to its report (engine.Run), which
// is written, failed or not, to Config.ReportPath.
func (a *Agent) runEpoch(ctx context.Context, num uint64, opts epochOpts) (report.EpochReport, error) {
	began := a.cfg.Clock.Now()
	fs, cat, err := a.storage(ctx, a.epochConns(opts.Opts))
	r, err := engine.Run(ctx, &a.engine, engine.Input{Num: num, Began: began, Storage: fs, Catalog: cat, Err: err,
		Trainer: opts.trainer, Hub: a.hub, Opts: opts.Opts})
	if r.Stage1 != nil {
		a.path.note(r.Stage1.Link)
	}
	a.path.noteEpoch(&r)
	return r, asConfig(err)
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
