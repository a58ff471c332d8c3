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
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/sophon-dl/sophon/internal/membership"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// ErrFingerprint: a storage agent serves a different dataset than the
// catalog's.
var ErrFingerprint = errors.New("computeagent: dataset fingerprint mismatch")

// Timeouts of the control RPCs and the connection health checks.
const (
	infoTimeout      = 10 * time.Second
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 20 * time.Second
)

// ErrClosed: the agent was closed.
var ErrClosed = errors.New("computeagent: closed")

// Agent is a compute agent: it reads the catalog from the storage agents,
// then runs epochs. Ordering guarantee: each sample of this agent's shard
// is delivered exactly once per epoch; batches are formed in completion
// order (a slow sample does not hold back the batches behind it) unless
// Config.StrictOrder, which delivers in the epoch's permutation order.
type Agent struct {
	cfg      Config
	log      zerolog.Logger
	sizes    *sizeModel
	pipeID   string
	pipeSpec []byte // sent on each stream's first request; nil for presets
	gpu      GPUMonitor
	// tail is what the trainer client finishes on its device when slots
	// hold uint8 (the pipeline's trailing to_tensor and normalize); nil
	// otherwise.
	tail *pipelineTail
	hub  *trainerHub // trainer mode, while Run serves
	m    *metrics

	mu        sync.Mutex
	discovery Discovery
	conns     map[string]*grpc.ClientConn
	cat       *Catalog
	closed    bool
}

// New validates cfg (filling in its zero values) and returns an agent. It
// does no I/O.
func New(cfg Config) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:    cfg,
		log:    cfg.Logger, // the binary names the component (internal/cli.Logger)
		sizes:  newSizeModel(cfg.Pipeline),
		pipeID: cfg.Pipeline.ID(),
		gpu:    cfg.GPU,
		conns:  map[string]*grpc.ClientConn{},
		m:      newMetrics(),
	}
	a.discovery = cfg.Discovery
	if cfg.Trainer.Socket != "" && a.trainerDType() == "uint8" {
		p, tail, err := cutTail(cfg.Pipeline)
		if err != nil {
			return nil, err
		}
		a.cfg.Pipeline, a.tail = p, tail
		a.sizes, a.pipeID = newSizeModel(p), p.ID()
	}
	if pre, err := ops.Preset(a.cfg.Pipeline.Name()); err != nil || pre.ID() != a.pipeID {
		if a.pipeSpec, err = json.Marshal(a.cfg.Pipeline.Spec()); err != nil {
			return nil, configErr("pipeline spec: %v", err)
		}
	}
	if a.gpu == nil {
		a.gpu = NewNVML(cfg.Clock, a.log)
	}
	return a, nil
}

// metrics is the agent's series; nil for an epoch run outside an agent
// (tests).
func (a *Agent) metrics() *metrics {
	if a == nil {
		return nil
	}
	return a.m
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
func (a *Agent) Run(ctx context.Context) ([]EpochReport, error) {
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
	if a.cfg.Policy != "" {
		return a.runPolicy(ctx, src)
	}
	var reports []EpochReport
	for i := 0; ; i++ {
		num, req, ok := src(ctx, i)
		if !ok {
			return reports, nil // in trainer mode: the agent was stopped
		}
		r, err := a.runEpoch(ctx, num, epochOpts{plan: a.cfg.Plan, trainer: req})
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
		creds = tlsconf.Credentials(tc, tlsconf.LogRejects(a.log.With().Str("storage", addr).Logger()))
	}
	maxMsg := a.cfg.MaxPayload
	if maxMsg == 0 {
		maxMsg = ops.DefaultMaxWirePayload
	}
	c, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(a.cfg.Dial),
		// A storage agent that stops answering (host down, link cut) fails
		// the stream, whose requests are then retried elsewhere. Storage
		// agents accept pings every 10 s or slower.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg+1<<20)))
	if err != nil {
		return nil, fmt.Errorf("computeagent: %s: %w", addr, err)
	}
	a.conns[key] = c
	return c, nil
}

// storage discovers the storage agents, reads the catalog on first use
// and keeps the agents whose dataset fingerprint matches it.
func (a *Agent) storage(ctx context.Context) ([]*fetcher, *Catalog, error) {
	a.mu.Lock()
	d := a.discovery
	a.mu.Unlock()
	if d == nil {
		return nil, nil, fmt.Errorf("%w: not joined to the cluster", ErrNoStorage)
	}
	eps, err := d.Storage(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("computeagent: discovery: %w", err)
	}
	slices.SortFunc(eps, func(x, y Endpoint) int { return cmp.Compare(x.Name, y.Name) })
	var fs []*fetcher
	var errs []error
	for _, ep := range eps {
		c, err := a.conn(ep.Addr, ep.Member)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		client := dataplanepb.NewStorageClient(c)
		ictx, cancel := context.WithTimeout(ctx, infoTimeout)
		info, err := client.Info(ictx, &dataplanepb.InfoRequest{})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: info: %w", ep.Name, err))
			a.log.Warn().Err(err).Str("storage", ep.Name).Msg("storage agent unreachable")
			continue
		}
		fp := info.GetFingerprint()
		if ep.Fingerprint != "" && ep.Fingerprint != fp {
			err := fmt.Errorf("%w: %s announced %q, serves %q", ErrFingerprint, ep.Name, ep.Fingerprint, fp)
			errs = append(errs, err)
			a.log.Error().Err(err).Msg("storage agent refused")
			continue
		}
		cat := a.Catalog()
		if cat == nil {
			if cat, err = readCatalog(ctx, client); err != nil {
				errs = append(errs, fmt.Errorf("%s: catalog: %w", ep.Name, err))
				continue
			}
			a.mu.Lock()
			a.cat = cat
			a.mu.Unlock()
			a.log.Info().Str("storage", ep.Name).Str("fingerprint", cat.Fingerprint).Uint64("samples", cat.Total).Msg("catalog read")
		}
		if fp != cat.Fingerprint {
			err := fmt.Errorf("%w: %s serves %q, catalog is %q", ErrFingerprint, ep.Name, fp, cat.Fingerprint)
			errs = append(errs, err)
			a.log.Error().Err(err).Msg("storage agent refused")
			continue
		}
		fs = append(fs, &fetcher{ep: ep, client: client, cpus: info.GetCpus()})
	}
	if len(fs) == 0 {
		errs = append(errs, fmt.Errorf("%d discovered", len(eps)))
		return nil, nil, fmt.Errorf("%w: %w", ErrNoStorage, errors.Join(errs...))
	}
	return fs, a.Catalog(), nil
}

// RunEpoch runs one epoch with Config.Plan and returns its report (also
// appended to Config.ReportPath). It does not consult Config.Policy.
func (a *Agent) RunEpoch(ctx context.Context, num uint64) (EpochReport, error) {
	return a.runEpoch(ctx, num, epochOpts{plan: a.cfg.Plan})
}

// epochOpts are what a policy run changes about one epoch.
type epochOpts struct {
	plan Plan
	// rec, when set, records stage 2's profile of every sample fetched
	// raw.
	rec *profiler.Recorder
	// annotate, when set, completes a successful epoch's report before it
	// is logged and written.
	annotate func(*EpochReport, *epochRun) error
	// trainer, when set, is the epoch the local trainer ranks asked for:
	// the epoch runs their orders and fills their slots.
	trainer *epochReq
}

func (a *Agent) runEpoch(ctx context.Context, num uint64, opts epochOpts) (EpochReport, error) {
	cfg := &a.cfg
	fs, cat, err := a.storage(ctx)
	if err != nil {
		return EpochReport{}, err
	}
	plan := opts.plan
	var order []uint64
	var tr *trainerEpoch
	if opts.trainer != nil {
		if tr, err = a.trainerOrder(opts.trainer, cat); err != nil {
			return EpochReport{}, err
		}
		order = tr.order
	} else {
		order = Order(cfg.Seed, num, cfg.Rank, cfg.World, cat.Total)
	}
	split := make([]int, len(order))
	n := cfg.Pipeline.Len()
	if a.tail != nil {
		// A plan names splits of the whole pipeline; with uint8 slots the
		// trainer runs its tail, so a split past the agent's part is cut back.
		n += 1
		if a.tail.normalize != nil {
			n++
		}
	}
	for i, s := range order {
		if split[i], err = splitOf(plan, s, n); err != nil {
			return EpochReport{}, err
		}
		split[i] = min(split[i], cfg.Pipeline.Len())
	}
	gate := 0
	if cfg.StrictOrder {
		gate = cfg.Window * len(fs)
	}
	e := &epochRun{
		a: a, cfg: cfg, num: num, cat: cat, order: order, split: split, plan: plan, rec: opts.rec,
		log:     a.log.With().Uint64("epoch", num).Logger(),
		work:    make(chan work),
		queue:   make(chan item, cfg.Queue*cfg.Batch),
		batches: make(chan *Batch),
		bySplit: splitCounter{},
	}
	if tr != nil {
		e.posRank, e.posJ, e.gpos = tr.rank, tr.j, tr.gpos
		e.asm = newAssembler(e, opts.trainer.conns, cfg.StrictOrder, cfg.Batch, tr.rows, tr.batches, tr.first, len(order))
		if err := a.hub.start(e.asm); err != nil {
			return EpochReport{}, err
		}
		defer a.hub.finish()
	}
	offloaded := make([]bool, len(order))
	for i, s := range order {
		offloaded[i] = split[i] > 0 || e.codec(s) != ops.CodecNone
	}
	e.sched = newSchedule(len(order), gate, len(fs), offloaded)
	a.log.Info().Uint64("epoch", num).Int("shard", len(order)).Int("storage", len(fs)).Str("plan", plan.Name()).Msg("epoch start")
	names := make([]string, len(fs))
	for i, f := range fs {
		f.e = e
		f.w = window{maxCount: cfg.Window, maxBytes: cfg.WindowBytes, outstanding: map[uint64]*request{}}
		names[i] = f.ep.Name
	}

	gctx, stopGPU := context.WithCancel(ctx)
	var gpu GPUStats
	var wg sync.WaitGroup
	wg.Go(func() { gpu = a.gpu.Sample(gctx) })
	a.m.cur.Store(e)
	defer a.m.cur.Store(nil)
	if cfg.Progress > 0 {
		wg.Go(func() { e.progress(gctx, cfg.Progress) })
	}
	start := cfg.Clock.Now()
	err = e.run(ctx, fs)
	end := cfg.Clock.Now()
	elapsed := end.Sub(start)
	stopGPU()
	wg.Wait()

	r := EpochReport{
		Epoch:                    num,
		Seconds:                  elapsed.Seconds(),
		StartUnixNS:              start.UnixNano(),
		EndUnixNS:                end.UnixNano(),
		Pipeline:                 a.pipeID,
		Plan:                     plan.Name(),
		StrictOrder:              cfg.StrictOrder,
		FetchOnly:                cfg.FetchOnly,
		Storage:                  names,
		Shard:                    len(order),
		Samples:                  e.samples,
		Batches:                  e.nbatch,
		SamplesFailed:            len(e.failed),
		Failed:                   e.failed,
		BytesReceived:            e.bytesReceived.Load(),
		BySplit:                  e.bySplit.list(),
		GPUIdleSeconds:           e.idle.Seconds(),
		ComputeCPUSeconds:        float64(e.computeNS.Load()) / 1e9,
		StorageCPUSeconds:        float64(e.storageNS.Load()) / 1e9,
		OffloadStorageCPUSeconds: float64(e.storageOffNS.Load()) / 1e9,
		OffloadStorageEffSeconds: float64(e.storageOffEffNS.Load()) / 1e9,
		Retried:                  int(e.retried.Load()),
		StreamFailures:           int(e.streamFailures.Load()),
		Duplicates:               int(e.duplicates.Load()),
		GPU:                      gpu,
	}
	if r.Failed == nil {
		r.Failed = []SampleFailure{}
	}
	slices.SortFunc(r.Failed, func(x, y SampleFailure) int { return cmp.Compare(x.Sample, y.Sample) })
	if e.asm != nil {
		r.Consumer = "trainer"
		r.Trainers = e.asm.stats()
		for _, t := range r.Trainers {
			r.Samples += t.Samples
			r.Batches += t.Batches
			r.GPUIdleSeconds += t.WaitSeconds / float64(len(r.Trainers))
		}
	}
	if elapsed > 0 {
		r.GPUIdleFraction = r.GPUIdleSeconds / elapsed.Seconds()
	}
	if err != nil {
		return r, err
	}
	if r.Samples+r.SamplesFailed != r.Shard {
		return r, fmt.Errorf("computeagent: epoch %d: delivered %d and failed %d of %d samples", num, r.Samples, r.SamplesFailed, r.Shard)
	}
	if opts.annotate != nil {
		if err := opts.annotate(&r, e); err != nil {
			return r, err
		}
	}
	a.m.epochs.Inc()
	a.log.Info().Uint64("epoch", num).Float64("seconds", r.Seconds).Int("samples", r.Samples).
		Int("failed", r.SamplesFailed).Int64("bytes", r.BytesReceived).Float64("gpu_idle", r.GPUIdleFraction).Msg("epoch done")
	if cfg.ReportPath != "" {
		if err := appendReport(cfg.ReportPath, r); err != nil {
			return r, fmt.Errorf("computeagent: report: %w", err)
		}
	}
	return r, nil
}

// join starts this agent's membership, announcing the compute role.
func (a *Agent) join() (*membership.Node, error) {
	node, err := a.cfg.gossip().Start(a.cfg.Name, membership.Meta{
		Role:    membership.RoleCompute,
		Cores:   float64(runtime.NumCPU()),
		Version: a.cfg.Version,
	}, a.log)
	if err != nil {
		return nil, fmt.Errorf("computeagent: join cluster: %w", err)
	}
	return node, nil
}

// serveMetrics serves /metrics and /healthz on Config.MetricsAddr until
// stop.
func (a *Agent) serveMetrics() (stop func(), err error) {
	lis, err := net.Listen("tcp", a.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("computeagent: metrics listen: %w", err)
	}
	srv := &http.Server{Handler: a.m.handler(), ReadHeaderTimeout: 10 * time.Second}
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

// progress logs the epoch's progress every interval until ctx ends.
func (e *epochRun) progress(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.sched.mu.Lock()
		recv, n := e.sched.nRecv, e.sched.n
		e.sched.mu.Unlock()
		el := time.Since(start).Seconds()
		e.log.Info().Int("received", recv).Int("of", n).Float64("samples_per_sec", float64(recv)/el).
			Float64("queue", e.a.m.queueDepth()).Int64("bytes", e.bytesReceived.Load()).Msg("progress")
	}
}
