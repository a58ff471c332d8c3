package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/sendcost"
	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// errStalled ends a stream that received nothing for the stall timeout
// while requests were outstanding.
var errStalled = errors.New("engine: stream stalled")

// Fetcher keeps a Fetch stream to one storage agent busy for one epoch on
// each of its connections (one, or Stripe's; see stripe), with a bounded
// window of requests in flight. On a stream error it requeues that
// stream's outstanding requests (any Fetcher may take them) and opens a
// new stream after a back-off, until the storage agent made no progress
// for Config.RetryBudget.
type Fetcher struct {
	e      *Epoch
	name   string // the storage agent's
	client dataplanepb.StorageClient
	// clients are its connections' clients, client first (Stripe);
	// stripes, the epoch's stripe on each.
	clients []dataplanepb.StorageClient
	stripes []*stripe
	// cpus is the storage agent's cores (InfoResponse.cpus), as float64
	// bits: a stripe's probe updates it.
	cpus atomic.Uint64
	// shareMu guards shareCPUs and jobs: this job's share of cpus and the
	// jobs the agent serves, as its Info last said (0: an agent before
	// shares).
	shareMu   sync.Mutex
	shareCPUs float64
	jobs      int
	// hold is the shards the agent holds (nil: every sample).
	hold *catalog.Holdings
	// served and servedBytes count the responses accepted from it.
	served, servedBytes atomic.Int64
	// paceFrom is when its first response of the epoch arrived (Unix
	// ns, 0: none yet); see pace.
	paceFrom atomic.Int64
	// cpu0 is the agent's CPU its Info gave at the epoch's start; opsNS
	// sums the storage_cpu_ns of its responses (see transport).
	cpu0  sendcost.CPU
	opsNS atomic.Int64

	// progress is when a response from this storage agent was last
	// accepted (Unix ns).
	progress atomic.Int64
	// tcp is the sockets of the connection to the agent (nil: unknown,
	// an in-memory connection), whose TCP_INFO the link sampler reads.
	tcp *tcpinfo.Conns
	// link is its readings of the link this epoch (link.go), mem what
	// they leave for the next epoch's fetcher (nil: nothing).
	link linkwatch.Tracker
	mem  *linkwatch.Memory
	// laneRate is the link rate capLanes last sized the raw lane for.
	laneRate float64
}

// SetTCP names the sockets of the connection to the storage agent, for
// the round trip and bytes in flight, and the link's memory across epochs
// (link.go; either may be nil). Call it before the fetcher joins an
// epoch.
func (f *Fetcher) SetTCP(c *tcpinfo.Conns, m *linkwatch.Memory) { f.tcp, f.mem = c, m }

// TCP is the sockets SetTCP named (nil: none).
func (f *Fetcher) TCP() *tcpinfo.Conns { return f.tcp }

// NewFetcher is the fetcher of storage agent name, reached through client,
// which answered Info with info for catalog cat; it fails when the agent's
// announced placement does not fit cat. It joins an epoch in
// Epoch.prepare.
func NewFetcher(name string, client dataplanepb.StorageClient, info *dataplanepb.InfoResponse, cat *catalog.Catalog) (*Fetcher, error) {
	h, err := catalog.Announce(name, info, cat)
	if err != nil {
		return nil, err
	}
	f := &Fetcher{name: name, client: client, clients: []dataplanepb.StorageClient{client}, shareCPUs: info.GetShareCpus(), jobs: int(info.GetJobs()),
		cpu0: sendcost.Of(info), hold: h}
	f.setCPUs(info.GetCpus())
	return f, nil
}

// Name is the storage agent's name.
func (f *Fetcher) Name() string { return f.name }

// Client is the storage agent's client.
func (f *Fetcher) Client() dataplanepb.StorageClient { return f.client }

// CPUs is the storage agent's cores this job plans for, as its Info last
// said: the job's share of the agent's budget (InfoResponse.share_cpus),
// or the whole budget from an agent before shares (0: unknown).
func (f *Fetcher) CPUs() float64 {
	f.shareMu.Lock()
	defer f.shareMu.Unlock()
	if f.shareCPUs > 0 {
		return f.shareCPUs
	}
	return f.Budget()
}

// Budget is the storage agent's whole CPU budget as its Info last said
// (0: unknown).
func (f *Fetcher) Budget() float64 { return math.Float64frombits(f.cpus.Load()) }

// setCPUs records the storage agent's cores as its Info said.
func (f *Fetcher) setCPUs(c float64) { f.cpus.Store(math.Float64bits(c)) }

// Share is this job's share of the storage agent's budget and the jobs
// the agent serves, as its Info last said (0, 0: an agent before shares).
func (f *Fetcher) Share() (cpus float64, jobs int) {
	f.shareMu.Lock()
	defer f.shareMu.Unlock()
	return f.shareCPUs, f.jobs
}

// RefreshShare asks the storage agent's Info again for this job's share
// (Share, CPUs), within timeout.
func (f *Fetcher) RefreshShare(ctx context.Context, timeout time.Duration) error {
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := f.client.Info(ictx, &dataplanepb.InfoRequest{})
	if err != nil {
		return err
	}
	f.shareMu.Lock()
	defer f.shareMu.Unlock()
	f.shareCPUs, f.jobs = info.GetShareCpus(), int(info.GetJobs())
	return nil
}

// Holds reports whether the agent holds sample (as its layout announced;
// an agent without one holds every sample).
func (f *Fetcher) Holds(sample uint64) bool { return f.hold.Holds(sample) }

// work is a response on its way to a finishing worker.
type work struct {
	f *Fetcher
	// win is the window r holds a slot of (a stripe's).
	win  *schedule.Window
	r    *schedule.Request
	resp *dataplanepb.FetchResponse
	// fail, when set, is the sample's failure instead of a response (no
	// storage agent left that holds it).
	fail *report.SampleFailure
	// local: a cache hit, served from the node's cache (no response).
	local bool
}

// run runs f's stripes for the epoch (runStripes).
func (f *Fetcher) run(ctx context.Context) error {
	f.progress.Store(f.e.cfg.Now().UnixNano())
	return f.runStripes(ctx)
}

// run keeps a stream open on s until the epoch has every sample: a
// failed one is reopened after a back-off, once its connection answers
// Info again, until the agent made no progress on any stripe for the
// retry budget (a *gaveUp error). Its streams' responses are handed on
// under epochCtx (session); ctx ends them.
func (s *stripe) run(ctx, epochCtx context.Context) error {
	f, e := s.f, s.f.e
	log := e.log.With().Str("storage", f.name).Int("conn", s.idx).Logger()
	budget := e.cfg.RetryBudget
	failures := 0
	for {
		var err error
		if failures > 0 {
			// Reopen a stream only to an agent that answers: a stopped
			// or unreachable one would hold a window of requests.
			err = s.probe(ctx)
		}
		if err == nil {
			_, err = s.session(ctx, epochCtx)
			if err == nil || e.sched.Complete() {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			n := e.sched.Requeue(&s.w)
			e.streamFailures.Add(1)
			e.retried.Add(int64(n))
			if m := e.cfg.Metrics; m != nil {
				m.Retried(n)
			}
			if errors.Is(err, errStalled) {
				e.stalls.Add(1)
			}
			log.Warn().Err(err).Int("requeued", n).Int("failures", failures+1).Msg("fetch stream failed")
		} else {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, catalog.ErrFingerprint) {
				return &gaveUp{err}
			}
			log.Debug().Err(err).Msg("storage agent still unavailable")
		}
		if e.sched.Complete() {
			return nil
		}
		idle := e.cfg.Now().Sub(time.Unix(0, f.progress.Load()))
		if idle > budget {
			return &gaveUp{fmt.Errorf("no progress for %v (retry budget %v), last: %w", idle.Round(time.Millisecond), budget, err)}
		}
		failures++
		if err := schedule.Pause(ctx, min(schedule.RetryDelay(failures), budget-idle), e.sched); err != nil {
			return err
		}
		if e.sched.Complete() {
			return nil
		}
	}
}

// giveUp drops this storage agent for the epoch; the epoch fails when it
// was the last one.
func (f *Fetcher) giveUp(ctx context.Context, err error) error {
	w := &f.stripes[0].w
	alive, orphans := f.e.sched.GiveUp(w)
	if alive == 0 {
		return fmt.Errorf("%w: %s: %w", ErrNoStorage, f.name, err)
	}
	f.e.log.Error().Err(err).Str("storage", f.name).Int("unavailable", len(orphans)).Msg("giving up on storage agent for this epoch")
	return f.unavailable(ctx, w, orphans, fmt.Sprintf("no live storage agent holds it (%s gave up: %v)", f.name, err))
}

// unavailable hands the orphaned requests on window w (one of f's) to the
// workers as failures of this epoch (KindUnavailable): under --on-error
// skip they are reported, never silently dropped; under fail the first
// one fails the epoch.
func (f *Fetcher) unavailable(ctx context.Context, w *schedule.Window, orphans []*schedule.Request, why string) error {
	for _, r := range orphans {
		r.Sample = f.e.order[r.Pos]
		f.e.sched.Claim(w, r.Tag, 0)
		fail := &report.SampleFailure{Sample: r.Sample, Kind: report.KindUnavailable, Where: "storage", Message: why}
		select {
		case f.e.work <- work{f: f, win: w, r: r, fail: fail}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// probe asks the storage agent for its Info on s's connection within the
// stall timeout and checks that it still serves the catalog's dataset.
func (s *stripe) probe(ctx context.Context) error {
	f := s.f
	pctx, cancel := context.WithTimeout(ctx, f.e.countRTT(min(f.e.stallTimeout(), ProbeTimeout)))
	defer cancel()
	// WaitForReady: a restarted agent is used as soon as it is back.
	info, err := s.client.Info(pctx, &dataplanepb.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if fp := info.GetFingerprint(); fp != f.e.cat.Fingerprint {
		return fmt.Errorf("%w: %s now serves %q, catalog is %q", catalog.ErrFingerprint, f.name, fp, f.e.cat.Fingerprint)
	}
	f.setCPUs(info.GetCpus())
	f.shareMu.Lock()
	f.shareCPUs, f.jobs = info.GetShareCpus(), int(info.GetJobs())
	f.shareMu.Unlock()
	return nil
}

// session runs one Fetch stream on s until the epoch's samples are all
// received (nil) or the stream fails; ctx ends the stream, epochCtx the
// hand-off of what it received. progress reports whether any response
// came. A watchdog declares the stream stalled (errStalled) when it has
// requests outstanding, the oldest sent more than the stall timeout ago,
// and received nothing for as long: it hedges them (the other fetchers may
// take them at once) and cancels the stream.
func (s *stripe) session(ctx, epochCtx context.Context) (progress bool, err error) {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, gctx := errgroup.WithContext(sctx)
	stream, err := s.client.Fetch(gctx)
	if err != nil {
		return false, err
	}
	s.lastRecv.Store(s.f.e.cfg.Now().UnixNano())
	var got atomic.Bool
	g.Go(func() error { return s.send(gctx, epochCtx, stream) })
	g.Go(func() error { return s.recv(epochCtx, stream, &got) })
	var wg sync.WaitGroup
	wctx, stopWatch := context.WithCancel(gctx)
	wg.Go(func() { s.watch(wctx, cancel) })
	err = g.Wait()
	stopWatch()
	wg.Wait()
	if c := context.Cause(sctx); errors.Is(c, errStalled) {
		err = c
	} else if c == errEpochDone {
		err = nil
	}
	return got.Load(), err
}

// errEpochDone ends a session whose epoch has every sample.
var errEpochDone = errors.New("engine: epoch complete")

// watch is session's watchdog; it ends the session through cancel.
func (s *stripe) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	f, e := s.f, s.f.e
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		done, sig := e.sched.State()
		if done {
			// A stopped storage agent never closes its stream: do not wait.
			cancel(errEpochDone)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-sig:
			continue
		case <-tick.C:
		}
		if s.handing.Load() {
			continue
		}
		now := e.cfg.Now()
		d := e.stallTimeout()
		oldest, ok := e.sched.OldestSent(&s.w)
		if !ok || now.Sub(oldest) < d || now.Sub(time.Unix(0, s.lastRecv.Load())) < d {
			continue
		}
		n := e.sched.Hedge(&s.w)
		e.hedged.Add(int64(n))
		e.log.Warn().Str("storage", f.name).Dur("stall_timeout", d).Int("hedged", n).Msg("fetch stream stalled: requests hedged to the other storage agents")
		cancel(fmt.Errorf("%w: %s sent nothing for %v", errStalled, f.name, d))
		return
	}
}

// send sends the requests s's window takes on stream, and hands the cache
// hits among them to the workers without sending them (their hand-off
// waits on epochCtx).
func (s *stripe) send(ctx, epochCtx context.Context, stream dataplanepb.Storage_FetchClient) error {
	e := s.f.e
	// The spec goes with the stream's first request and with its first
	// that runs ops: the storage agent ignores it on a split-0 fetch.
	first, piped := true, false
	for {
		r, wait, done := e.sched.Take(&s.w, e.estimate)
		if done {
			return stream.CloseSend()
		}
		if r == nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-wait:
			}
			continue
		}
		if e.hit(r.Pos) {
			if err := s.local(epochCtx, r); err != nil {
				return err
			}
			continue
		}
		codec := e.codec(r.Sample)
		if e.cc.Want(r.Pos) {
			codec = wireform.CodecNone // the cache keeps the file itself
		}
		e.shedder().Requested(r.Pos, r.Split, e.split[r.Pos])
		if k := e.split[r.Pos]; r.Split != k {
			// Shed: raw, whose bytes the epoch's estimate left did not
			// count.
			codec = wireform.CodecNone
			e.left.Add(r.Est - e.cfg.Sizes.Estimate(k, e.cat.RawSizes[r.Sample]))
		}
		req := &dataplanepb.FetchRequest{
			Tag:        r.Tag,
			Sample:     r.Sample,
			Epoch:      e.num,
			Seed:       e.cfg.Seed,
			PipelineId: e.cfg.PipelineID,
			Codec:      dataplanepb.Codec(codec),
		}
		if r.Split == ops.SplitCut {
			req.Cut = true
		} else {
			req.Split = uint32(r.Split)
		}
		if r.Split != 0 || req.Codec != dataplanepb.Codec_CODEC_NONE {
			// An offload: let the storage agent answer raw when its CPU
			// cannot keep up, unless the operator wants strict plans.
			req.Fallback = !e.cfg.StrictOffload
			if e.runPlan().Hinted() {
				req.Priority, req.CostNs = e.runPlan().Hint(r.Sample)
			}
			if req.Fallback {
				req.HorizonNs, req.RawExtraNs = e.horizon(), e.rawExtra(r.Sample, r.Est)
			}
		}
		if first || (!piped && r.Split != 0) {
			req.PipelineSpec = e.cfg.PipelineSpec
			first, piped = false, r.Split != 0
		}
		if err := stream.Send(req); err != nil {
			if err == io.EOF {
				// The real error comes from Recv.
				<-ctx.Done()
				return ctx.Err()
			}
			return err
		}
	}
}

// recv matches responses to requests and hands them to the workers. The
// hand-off waits on the epoch's ctx, not the stream's: a claimed response
// is never dropped because its stream failed afterwards.
func (s *stripe) recv(epochCtx context.Context, stream dataplanepb.Storage_FetchClient, got *atomic.Bool) error {
	f, e := s.f, s.f.e
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			if n := e.sched.Outstanding(&s.w); n > 0 || !e.sched.Complete() {
				return fmt.Errorf("engine: %s closed the stream with %d requests outstanding", f.name, n)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if resp.GetError().GetKind() == dataplanepb.ErrorKind_ERROR_KIND_DEADLINE &&
			e.sched.RetryTag(&s.w, resp.GetTag(), e.cfg.Retries) {
			// The storage agent was too busy: transient, ask again.
			e.retried.Add(1)
			if m := e.cfg.Metrics; m != nil {
				m.Retried(1)
			}
			continue
		}
		now := e.cfg.Now()
		prev := time.Unix(0, s.lastRecv.Swap(now.UnixNano()))
		r, dup := e.sched.Claim(&s.w, resp.GetTag(), int64(len(resp.GetData())))
		if dup {
			e.duplicates.Add(1)
			continue
		}
		if r == nil {
			e.cfg.Warnings.WarnPeer(e.log, peerlog.UnknownResponse, f.name).Str("storage", f.name).Uint64("tag", resp.GetTag()).Msg("response for an unknown tag dropped")
			continue
		}
		got.Store(true)
		f.progress.Store(now.UnixNano())
		e.left.Add(-r.Est)
		if !r.Sent.IsZero() {
			// The silence before this response: since the one before,
			// or since the request when the stream had been idle. A
			// request's own latency would count the storage agent's
			// queue, which a healthy but busy replica keeps long.
			e.lat.Observe(min(now.Sub(prev), now.Sub(r.Sent)))
		}
		if resp.GetSample() != r.Sample && resp.GetError() == nil {
			resp = &dataplanepb.FetchResponse{Tag: resp.GetTag(), Sample: r.Sample, Error: &dataplanepb.SampleError{
				Kind:    dataplanepb.ErrorKind_ERROR_KIND_INTERNAL,
				Message: fmt.Sprintf("response names sample %d", resp.GetSample()),
			}}
		}
		f.account(r, resp, now)
		s.handing.Store(true)
		select {
		case e.work <- work{f: f, win: &s.w, r: r, resp: resp}:
		case <-epochCtx.Done():
			s.handing.Store(false)
			return epochCtx.Err()
		}
		s.lastRecv.Store(e.cfg.Now().UnixNano())
		s.handing.Store(false)
	}
}

// account counts an accepted response to r, received at now: bytes, the
// storage CPU (the offloads' apart) and how it was served, for the report,
// the metrics, pacing and shedding.
func (f *Fetcher) account(r *schedule.Request, resp *dataplanepb.FetchResponse, now time.Time) {
	e := f.e
	e.bytesReceived.Add(int64(len(resp.GetData())))
	e.firstRecv.CompareAndSwap(0, now.UnixNano())
	for t := e.lastRecv.Load(); t < now.UnixNano() && !e.lastRecv.CompareAndSwap(t, now.UnixNano()); t = e.lastRecv.Load() {
	}
	f.served.Add(1)
	f.servedBytes.Add(int64(len(resp.GetData())))
	f.pace(now)
	if m := e.cfg.Metrics; m != nil {
		m.Received(r.Split, len(resp.GetData()))
	}
	e.storageNS.Add(int64(resp.GetStorageCpuNs()))
	f.opsNS.Add(int64(resp.GetStorageCpuNs()))
	switch resp.GetServed() {
	case dataplanepb.Served_SERVED_RAW_CONTENDED:
		e.servedRawContended.Add(1)
	case dataplanepb.Served_SERVED_RAW_UNCUTTABLE:
		e.servedRawUncuttable.Add(1)
	}
	asPlanned := r.Split != 0 && resp.GetServed() == dataplanepb.Served_SERVED_AS_REQUESTED
	held := float64(resp.GetStorageBudgetNs()) * f.share()
	if asPlanned {
		plan := e.runPlan()
		i, this := plan.At(r.Sample, r.Split)
		if this && plan.Hinted() {
			_, c := plan.HintAt(i)
			e.offPlannedNS.Add(int64(float64(c) / plan.StorageSpeed()))
			e.planOffNS.Add(int64(resp.GetStorageCpuNs()))
			e.planOffEffNS.Add(int64(held))
		}
		e.storageOffNS.Add(int64(resp.GetStorageCpuNs()))
		e.storageOffEffNS.Add(int64(held))
		if want, ok := plan.VaryingAt(i); this && ok && resp.GetError() == nil {
			if info, err := wireform.ReadHeader(resp.GetData()); err == nil {
				e.varBytes.Add(int64(info.StoredLen))
				e.varPlanned.Add(want)
			}
		}
	}
	e.shedder().Received(r.Pos, asPlanned, held)
}

// share is each of the storage agent's workers' share of a core: its
// whole budget's cpus over ceil(cpus) workers (1 when cpus is unknown;
// storage-agent/budget.Size), in which the agent counts its budget time
// (storage_budget_ns). Not this job's share of the budget (CPUs): the
// agent's workers run at the whole budget's share whichever job they
// serve, and a 0.5-core share of a 1-core agent priced its offloads at
// half their CPU.
func (f *Fetcher) share() float64 {
	c := f.Budget()
	if !(c > 0) {
		return 1
	}
	return c / math.Ceil(c)
}
