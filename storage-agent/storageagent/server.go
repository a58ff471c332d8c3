package storageagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/internal/errkind"
	"github.com/sophon-dl/sophon/internal/peerlog"
	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/budget"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
)

var _ dataplanepb.StorageServer = (*server)(nil)

// maxCatalogPathBytes ends a catalog page early once its paths reach it:
// the paths bound a page's size as its sample count does. A variable for
// tests only.
var maxCatalogPathBytes = 4 << 20

const (
	// defaultCatalogPage is the catalog page size when the request says 0.
	defaultCatalogPage = 65536
	// maxCatalogPage bounds a catalog page (about 15 bytes per sample).
	maxCatalogPage = 1 << 20
	// pipelineCacheSize bounds the pipelines built from client specs that
	// the agent remembers across streams.
	pipelineCacheSize = 64
	// streamPipelines bounds the pipelines one stream remembers.
	streamPipelines = 16
	// failLogBurst bounds the per-sample failure lines logged per second.
	failLogBurst = 20
	// wireSlack is room left in a gRPC message for the response's other
	// fields.
	wireSlack = 4 << 10
)

// Results waiting to be sent.
//
// The fair queues (budget.Queue) skip a stream while it has results
// waiting to be sent above streamBufferBytes, or while the agent's buffered
// results as a whole are above globalBufferBytes and this stream has any
// (runnable): a stream whose client stops reading keeps its own results and
// nothing else, and never holds a worker (results are handed over into a
// buffer sized to the stream's admission window, so delivering never
// blocks). Every stream admits at most Config.Queue requests at a time
// (queued, running or unsent), so memory is bounded by the stream count
// times that window.
const (
	streamBufferBytes = 8 << 20
	globalBufferBytes = 128 << 20
)

// server implements the Storage service over a dataset. Requests from all
// streams share one queue and one worker pool (see workers.go), within the
// CPU budget (package budget).
type server struct {
	dataplanepb.UnimplementedStorageServer

	ds      *dataset.Dataset
	name    string
	version string
	cpus    float64
	egress  uint64  // bytes per second, 0 unknown
	hold    *holder // set by New once the layout is known
	share   float64 // each worker's share of a core
	remote  bool    // the dataset is in an object store: read ahead (readahead.go)
	timeout time.Duration
	// limits bound every pipeline run on the agent's data, whatever the
	// client asks; opTimeout is each run's deadline.
	limits    ops.Limits
	opTimeout time.Duration
	pending   int // requests a stream may have in the agent (Config.Queue)
	maxWire   int // the largest wire form a response may carry
	idle      budget.IdleWatch
	log       zerolog.Logger
	failLog   zerolog.Logger   // per-sample failures, sampled
	peer      *peerlog.Limiter // warnings a client causes, rate-limited
	m         *metrics
	// conns are the connections the agent accepted (connListener): Info
	// sends the TCP_INFO of the one it came on (tcpinfo.Header).
	conns tcpinfo.Conns
	// congestion is the TCP congestion control of the connections the
	// agent accepts (a string; connListener stores what the kernel set on
	// the last one), which Info announces.
	congestion atomic.Value

	// jobs are the jobs served and their shares of the budget.
	jobs *budget.Jobs

	queue *budget.Queue[*fetchStream, *job]
	// wc admits offloads with FetchRequest.fallback (work-conserving
	// offload, budget.Conserver).
	wc *budget.Conserver
	// raw holds uncompressed split-0 fetches, which run no ops; rawWorker
	// serves them outside the CPU budget (see workers.go).
	raw *budget.Queue[*fetchStream, *job]
	// busy and rawBusy tell when each worker took its current job.
	busy, rawBusy *budget.StallWatch
	// buffered is the bytes of results waiting to be sent, all streams.
	buffered atomic.Int64
	// sentBytes and sentOpsNS sum the payload bytes and storage_cpu_ns of
	// every response sent (InfoResponse.sent_bytes, sent_ops_cpu_ns).
	sentBytes, sentOpsNS atomic.Uint64

	// allowed are the pipelines the operator registered (the presets by
	// default), by ID; clientSpecs lets clients send others.
	allowed     map[string]*ops.Pipeline
	clientSpecs bool

	mu    sync.Mutex
	cache map[string]*ops.Pipeline // built from client specs, by ID

	// beforeJob, when set (tests), runs before each job.
	beforeJob func()

	streamsMu           sync.Mutex
	streams             int            // open Fetch streams
	peerStream          map[string]int // open Fetch streams by peer
	maxStreams, maxPeer int
}

// job is one queued request.
type job struct {
	st   *fetchStream
	req  *dataplanepb.FetchRequest
	pipe *ops.Pipeline
	recv time.Time // when the request was received
	// served is SERVED_RAW_CONTENDED for an offload the work-conserving
	// controller answers raw; est is an admitted offload's estimated CPU
	// (ns) in the controller's backlog.
	served dataplanepb.Served
	est    float64
	// pre is the sample read ahead (see readAhead); nil when it was not.
	pre *readAhead
}

// fetchStream is the state one Fetch call shares with the workers.
type fetchStream struct {
	ctx  context.Context // ends when the stream does
	peer string          // the client's identity, for fair queueing
	// job names the stream's job (jobOf), weight is the job's.
	job    string
	weight float64
	// results carries the budgeted workers' responses, raw the raw
	// workers'; the sender sends budgeted results first. Both hold the
	// stream's whole admission window, so delivering never blocks.
	results, raw chan result
	// slots admits requests: one is taken per request received and given
	// back when its response is sent (Config.Queue per stream).
	slots    chan struct{}
	buffered atomic.Int64   // bytes of results delivered but not yet sent
	pending  sync.WaitGroup // requests taken in but not yet delivered or dropped
}

// result is a response and the split it was cut at (for the metrics).
type result struct {
	resp  *dataplanepb.FetchResponse
	split string
}

func newServer(ds *dataset.Dataset, cfg Config, workers int, share float64, peer *peerlog.Limiter) (*server, error) {
	s := &server{
		ds:          ds,
		name:        cfg.Name,
		version:     cfg.Version,
		cpus:        cfg.CPUs,
		egress:      cfg.Egress,
		share:       share,
		remote:      ds.Remote(),
		timeout:     cfg.RequestTimeout,
		limits:      cfg.Limits,
		opTimeout:   cfg.OpTimeout,
		pending:     cfg.Queue,
		maxWire:     MaxMessageBytes - wireSlack,
		log:         cfg.Logger,
		failLog:     cfg.Logger.Sample(&zerolog.BurstSampler{Burst: failLogBurst, Period: time.Second}),
		peer:        peer,
		busy:        budget.NewStallWatch(workers),
		rawBusy:     budget.NewStallWatch(budget.RawWorkers),
		allowed:     map[string]*ops.Pipeline{},
		clientSpecs: cfg.AllowClientSpecs,
		cache:       map[string]*ops.Pipeline{},
		peerStream:  map[string]int{},
		maxStreams:  cfg.MaxStreams,
		maxPeer:     cfg.MaxStreamsPerPeer,
	}
	jobs, err := budget.NewJobs(budget.JobsConfig{CPUs: cfg.CPUs, Weights: cfg.JobWeights, Window: cfg.JobWindow, Max: cfg.MaxJobs, Off: cfg.NoJobShares})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s.jobs = jobs
	s.wc = budget.NewConserver(workers, cfg.OpTimeout)
	s.queue = budget.NewQueue[*fetchStream, *job](s.runnable)
	s.raw = budget.NewQueue[*fetchStream, *job](s.runnable)
	s.m = newMetrics(func() float64 { return float64(s.queue.Len() + s.raw.Len()) }, func() float64 { return float64(s.buffered.Load()) }, peer.Collectors()...)
	names := cfg.Pipelines
	if len(names) == 0 {
		names = ops.PresetNames()
	}
	for _, name := range names {
		p, err := ops.LoadPipeline(name)
		if err != nil {
			return nil, fmt.Errorf("%w: pipeline: %w", ErrConfig, err)
		}
		s.allowed[p.ID()] = p
	}
	return s, nil
}

// Pipelines are the IDs of the pipelines the agent runs for any client.
func (s *server) pipelines() []string {
	ids := make([]string, 0, len(s.allowed))
	for id := range s.allowed {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// runnable reports whether a worker may take st's next job now: not while
// its client leaves too many results unread (see streamBufferBytes).
func (s *server) runnable(st *fetchStream) bool {
	mine := st.buffered.Load()
	return mine < streamBufferBytes && (mine == 0 || s.buffered.Load() < globalBufferBytes)
}

// openStream admits a Fetch stream from peer, within the agent's and the
// peer's stream limits, and returns the function that closes it.
func (s *server) openStream(peer string) (func(), error) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.streams >= s.maxStreams {
		s.m.rejected.WithLabelValues("agent").Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "storage agent %s: %d fetch streams open, the limit is %d", s.name, s.streams, s.maxStreams)
	}
	if n := s.peerStream[peer]; n >= s.maxPeer {
		s.m.rejected.WithLabelValues("peer").Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "storage agent %s: peer %s has %d fetch streams open, the limit per peer is %d", s.name, peer, n, s.maxPeer)
	}
	s.streams++
	s.peerStream[peer]++
	return func() {
		s.streamsMu.Lock()
		defer s.streamsMu.Unlock()
		s.streams--
		if s.peerStream[peer]--; s.peerStream[peer] == 0 {
			delete(s.peerStream, peer)
		}
	}, nil
}

// peerKey names a stream's client for fairness and stream limits: the
// certificate's first URI (or its common name) under mutual TLS, else the
// remote IP address.
func peerKey(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "unknown"
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		leaf := ti.State.PeerCertificates[0]
		if len(leaf.URIs) > 0 {
			return leaf.URIs[0].String()
		}
		if leaf.Subject.CommonName != "" {
			return "cn:" + leaf.Subject.CommonName
		}
	}
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}
	return p.Addr.String()
}

// jobOf names the job of a call: the name its compute agent sent in the
// dataplanepb.JobMetadata metadata, else "peer:" and the client's identity
// (peerKey); named reports whether it sent one.
func jobOf(ctx context.Context) (job string, named bool, err error) {
	v := metadata.ValueFromIncomingContext(ctx, dataplanepb.JobMetadata)
	if len(v) == 0 {
		return "peer:" + peerKey(ctx), false, nil
	}
	if err := dataplanepb.CheckJobName(v[0]); err != nil {
		return "", false, status.Error(codes.InvalidArgument, err.Error())
	}
	return v[0], true, nil
}

// Info describes the agent: its budget and the asking job's share of it,
// its dataset, the dataset's shard layout and the shards the agent holds
// now. A named job that asks counts as active for the job window; one
// that says it is leaving leaves the shares (budget.Jobs.Leave).
func (s *server) Info(ctx context.Context, req *dataplanepb.InfoRequest) (*dataplanepb.InfoResponse, error) {
	job, named, err := jobOf(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	switch {
	case named && req.GetLeaving():
		s.jobs.Leave(job)
		s.log.Debug().Str("job", job).Msg("job leaving")
	case named:
		s.jobs.Seen(job, now)
	}
	s.tcpHeader(ctx)
	sh := s.jobs.Share(job, now)
	held, _, members := s.hold.state()
	heldWire := make([]uint32, len(held))
	for i, sh := range held {
		heldWire[i] = uint32(sh) // below placement.MaxShards
	}
	return &dataplanepb.InfoResponse{
		Node:              s.name,
		Version:           s.version,
		Fingerprint:       s.ds.Fingerprint(),
		Cpus:              s.cpus,
		Samples:           s.ds.Len(),
		Layout:            s.hold.wire,
		HeldShards:        heldWire,
		Replicas:          uint32(s.hold.replicas), // at most placement.MaxReplicas
		EgressBytesPerSec: s.egress,
		PlacementName:     s.hold.self,
		PlacementMembers:  slices.Clone(members),
		ProcessCpuNs:      uint64(max(cpuclock.Process(), 0)),
		MissingShards:     s.hold.missingWire,
		ShareCpus:         sh.CPUs,
		Jobs:              uint32(sh.Jobs), // at most the agent's MaxJobs + 1
		Job:               job,
		JobWeight:         sh.Weight,
		SentBytes:         s.sentBytes.Load(),
		TcpCongestion:     s.congestionName(),
		SentOpsCpuNs:      s.sentOpsNS.Load(),
	}, nil
}

// congestionName is the congestion control of the connections the agent
// accepts ("" before the first, or where the kernel does not say).
func (s *server) congestionName() string {
	name, _ := s.congestion.Load().(string)
	return name
}

// tcpHeader sends, as the response header tcpinfo.Header, the TCP_INFO of
// this agent's end of the connection the call came on: the sender's view
// of the data's direction (its round trip, retransmits, bytes in flight),
// which the compute agent cannot read on its own socket. Nothing when the
// connection is unknown (an in-memory listener) or TCP_INFO unavailable.
func (s *server) tcpHeader(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return
	}
	c, ok := s.conns.Lookup(p.Addr.String())
	if !ok {
		return
	}
	if info, err := tcpinfo.Read(c); err == nil {
		_ = grpc.SetHeader(ctx, metadata.Pairs(tcpinfo.Header, info.Encode()))
	}
}

// Catalog streams labels, raw sizes, content hashes, paths and JPEG header
// summaries in pages; the first
// page also carries the fingerprint, the total, the class names and the
// paths digest.
func (s *server) Catalog(req *dataplanepb.CatalogRequest, stream grpc.ServerStreamingServer[dataplanepb.CatalogPage]) error {
	size := uint64(req.GetPageSize())
	if size == 0 {
		size = defaultCatalogPage
	}
	size = min(size, maxCatalogPage)
	n := s.ds.Len()
	for first := uint64(0); first == 0 || first < n; {
		end := min(first+size, n)
		page := &dataplanepb.CatalogPage{
			First:    first,
			Labels:   make([]uint32, 0, end-first),
			RawSizes: make([]uint64, 0, end-first),
			// 32 bytes per sample: SHA-256 of its raw bytes.
			ContentHashes: make([]byte, 0, 32*(end-first)),
			JpegHeaders:   make([]byte, 0, jpeg.SummarySize*(end-first)),
		}
		if first == 0 {
			page.Fingerprint = s.ds.Fingerprint()
			page.Total = n
			page.ClassNames = s.ds.ClassNames()
			pd := s.ds.PathsDigest()
			page.PathsDigest = pd[:]
		}
		pathBytes := 0
		for i := first; i < end; i++ {
			page.Labels = append(page.Labels, s.ds.Label(i))
			page.RawSizes = append(page.RawSizes, s.ds.RawSize(i))
			h := s.ds.ContentHash(i)
			page.ContentHashes = append(page.ContentHashes, h[:]...)
			page.JpegHeaders, _ = s.ds.Header(i).AppendBinary(page.JpegHeaders)
			page.Paths = append(page.Paths, []byte(s.ds.RawPath(i)))
			if pathBytes += len(page.Paths[len(page.Paths)-1]); pathBytes >= maxCatalogPathBytes {
				break
			}
		}
		if err := stream.Send(page); err != nil {
			return err
		}
		if len(page.Labels) == 0 { // an empty dataset: one page, no samples
			break
		}
		first += uint64(len(page.Labels))
	}
	return nil
}

// Fetch serves one stream. The calling goroutine receives requests and
// queues them in the stream's lane (budget.Queue); workers deliver results
// into the stream's buffers; one sender goroutine sends them as they come. The
// stream admits at most Config.Queue requests at a time: when its client
// stops reading, the sender blocks, the admission window fills and this
// loop stops receiving, while the workers serve other streams. When the
// client half-closes, outstanding requests are answered before Fetch
// returns; when the stream is cancelled, they are dropped.
func (s *server) Fetch(stream grpc.BidiStreamingServer[dataplanepb.FetchRequest, dataplanepb.FetchResponse]) error {
	key := peerKey(stream.Context())
	jobName, _, err := jobOf(stream.Context())
	if err != nil {
		s.peer.WarnPeer(s.log, peerlog.FetchStreamRefused, key).Str("peer", key).Err(err).Msg("fetch stream refused")
		return err
	}
	closeStream, err := s.openStream(key)
	if err != nil {
		s.peer.WarnPeer(s.log, peerlog.FetchStreamRefused, key).Str("peer", key).Err(err).Msg("fetch stream refused")
		return err
	}
	defer closeStream()
	closeJob, err := s.jobs.Open(jobName, time.Now())
	if err != nil {
		s.peer.WarnPeer(s.log, peerlog.FetchStreamRefused, key).Str("peer", key).Str("job", jobName).Err(err).Msg("fetch stream refused")
		return status.Errorf(codes.ResourceExhausted, "storage agent %s: job %q: %v", s.name, jobName, err)
	}
	defer func() { closeJob(time.Now()) }()
	s.m.streams.Inc()
	defer s.m.streams.Dec()
	log := s.log.With().Str("peer", key).Str("job", jobName).Logger()
	log.Debug().Msg("fetch stream opened")
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	st := &fetchStream{
		ctx:     ctx,
		peer:    key,
		job:     jobName,
		weight:  s.jobs.Weight(jobName),
		results: make(chan result, s.pending),
		raw:     make(chan result, s.pending),
		slots:   make(chan struct{}, s.pending),
	}

	var wg sync.WaitGroup
	var sendErr error
	wg.Go(func() {
		sendErr = s.send(ctx, stream, st)
		if sendErr != nil {
			cancel()
		}
	})
	recvErr := s.receive(ctx, stream, st)
	if recvErr != nil {
		cancel()
	}
	if ctx.Err() != nil {
		for _, q := range []*budget.Queue[*fetchStream, *job]{s.queue, s.raw} {
			for range q.Drop(st) {
				st.pending.Done()
			}
		}
	}
	st.pending.Wait()
	close(st.results)
	close(st.raw)
	wg.Wait()
	s.buffered.Add(-st.buffered.Load()) // results left unsent
	log.Debug().AnErr("recv", recvErr).AnErr("send", sendErr).Msg("fetch stream closed")
	if sendErr != nil {
		return sendErr
	}
	if recvErr != nil && !errors.Is(recvErr, context.Canceled) {
		return recvErr
	}
	return ctx.Err()
}

// send sends st's results until both buffers are closed or ctx ends,
// budgeted results first, and gives back a slot per response sent.
func (s *server) send(ctx context.Context, stream grpc.BidiStreamingServer[dataplanepb.FetchRequest, dataplanepb.FetchResponse], st *fetchStream) error {
	first, second := (<-chan result)(st.results), (<-chan result)(st.raw)
	for first != nil || second != nil {
		var r result
		var ok bool
		select {
		case r, ok = <-first:
			if !ok {
				first = nil
				continue
			}
		default:
			select {
			case r, ok = <-first:
				if !ok {
					first = nil
					continue
				}
			case r, ok = <-second:
				if !ok {
					second = nil
					continue
				}
			case <-ctx.Done():
				return nil
			}
		}
		// Counted before it goes, so that an Info the client asks once
		// it has the response counts it.
		s.sentBytes.Add(uint64(len(r.resp.Data)))
		s.sentOpsNS.Add(r.resp.StorageCpuNs)
		err := stream.Send(r.resp)
		s.unbuffer(st, int64(len(r.resp.Data)))
		<-st.slots
		if err != nil {
			return err
		}
		if r.resp.Error == nil {
			s.m.sent(r.split, len(r.resp.Data))
		}
	}
	return nil
}

// unbuffer accounts n bytes of st's results as sent, waking the workers
// when that makes st (or, with the agent's buffer below its bound, any
// stream) runnable again.
func (s *server) unbuffer(st *fetchStream, n int64) {
	if n == 0 {
		return
	}
	mine := st.buffered.Add(-n)
	all := s.buffered.Add(-n)
	if mine+n >= streamBufferBytes && mine < streamBufferBytes || all+n >= globalBufferBytes && all < globalBufferBytes || mine == 0 && all >= globalBufferBytes {
		s.queue.Wake()
		s.raw.Wake()
	}
}

// receive reads requests until the client half-closes (nil) or the stream
// fails, taking an admission slot before each. Pipelines whose spec came
// on this stream are remembered in local.
func (s *server) receive(ctx context.Context, stream grpc.BidiStreamingServer[dataplanepb.FetchRequest, dataplanepb.FetchResponse], st *fetchStream) error {
	local := map[string]*ops.Pipeline{}
	for {
		select {
		case st.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		j := &job{st: st, req: req, recv: time.Now()}
		st.pending.Add(1)
		// A split-0 fetch runs no ops and needs no pipeline (any replica
		// serves a retry at split 0); a spec it carries is ignored.
		if req.GetSplit() > 0 || req.GetCut() {
			j.pipe, err = s.resolve(req, local)
			req.PipelineSpec = nil // queued jobs keep no client bytes
			if err != nil {
				s.deliver(j, s.failure(st.peer, req, err))
				continue
			}
		}
		if !isRaw(req) && req.GetFallback() {
			ok, est := s.wc.Admit(req.GetPriority(), req.GetCostNs(), req.GetHorizonNs(), req.GetRawExtraNs())
			if ok {
				j.est = est
			} else {
				j.served = dataplanepb.Served_SERVED_RAW_CONTENDED
				s.m.served.WithLabelValues("contended").Inc()
			}
		}
		if j.raw() {
			s.raw.PushJob(st, st.job, st.weight, st.peer, j)
		} else {
			s.queue.PushJob(st, st.job, st.weight, st.peer, j)
		}
	}
}

// resolve finds the request's pipeline: one the operator registered (the
// presets by default); one whose spec the request carries (which must hash
// to the ID) when its ops are the first ops of a registered pipeline (a
// compute agent that cuts a registered pipeline short, as trainer mode
// does, runs the same ops here) or when the operator allows client specs;
// or one built earlier from such a spec.
func (s *server) resolve(req *dataplanepb.FetchRequest, local map[string]*ops.Pipeline) (*ops.Pipeline, error) {
	id := req.GetPipelineId()
	if p := s.allowed[id]; p != nil {
		return p, nil
	}
	if spec := req.GetPipelineSpec(); len(spec) > 0 {
		if len(spec) > MaxSpecBytes {
			return nil, fmt.Errorf("%w: pipeline spec of %d bytes, the limit is %d", ops.ErrSpec, len(spec), MaxSpecBytes)
		}
		sp, err := ops.ParseSpec(spec)
		if err != nil {
			return nil, err
		}
		p, err := sp.Build()
		if err != nil {
			return nil, err
		}
		if p.ID() != id {
			return nil, fmt.Errorf("%w: spec hashes to %q, request names %q", ops.ErrSpec, p.ID(), id)
		}
		if !s.clientSpecs && !s.registeredPrefix(p) {
			return nil, s.unregistered(id)
		}
		remember(local, p, streamPipelines)
		s.mu.Lock()
		remember(s.cache, p, pipelineCacheSize)
		s.mu.Unlock()
		return p, nil
	}
	if p := local[id]; p != nil {
		return p, nil
	}
	s.mu.Lock()
	p := s.cache[id]
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	if !s.clientSpecs {
		return nil, s.unregistered(id)
	}
	return nil, fmt.Errorf("%w: unknown pipeline %q: not registered; send its spec with the request", ops.ErrSpec, id)
}

// unregistered is the error for a pipeline the agent may not run.
func (s *server) unregistered(id string) error {
	return fmt.Errorf("%w: pipeline %q is not registered on this storage agent (it runs %v and their first ops); the operator registers a spec with --pipeline FILE, or lets clients send theirs with --allow-client-specs", ops.ErrSpec, id, s.pipelines())
}

// registeredPrefix reports whether p's ops, defaults spelled out, are the
// first ops of a registered pipeline.
func (s *server) registeredPrefix(p *ops.Pipeline) bool {
	mine := p.Spec().Ops
	for _, r := range s.allowed {
		theirs := r.Spec().Ops
		if len(mine) <= len(theirs) && reflect.DeepEqual(mine, theirs[:len(mine)]) {
			return true
		}
	}
	return false
}

// remember adds p to cache, evicting an arbitrary entry when cache holds
// limit pipelines.
func remember(cache map[string]*ops.Pipeline, p *ops.Pipeline, limit int) {
	if _, ok := cache[p.ID()]; ok {
		return
	}
	if len(cache) >= limit {
		for id := range cache {
			delete(cache, id)
			break
		}
	}
	cache[p.ID()] = p
}

// deliver hands a result to the stream's sender, or drops it when the
// stream has ended, and marks the job done.
func (s *server) deliver(j *job, resp *dataplanepb.FetchResponse) {
	defer j.st.pending.Done()
	if resp.Error != nil {
		s.m.failed(resp.Error.Kind)
	}
	ch := j.st.results
	if j.raw() {
		ch = j.st.raw
	}
	n := int64(len(resp.Data))
	j.st.buffered.Add(n)
	s.buffered.Add(n)
	// Never blocks: the buffer holds the stream's whole admission window.
	ch <- result{resp: resp, split: splitLabel(j.req, resp.GetServed())}
}

// handle runs one job on the calling worker and returns the thread CPU
// time it took.
func (s *server) handle(j *job, late time.Duration) time.Duration {
	s.idle.Begin()
	defer s.idle.End()
	if j.st.ctx.Err() != nil {
		s.wc.Released(j.est)
		j.st.pending.Done() // the stream is gone: drop
		return 0
	}
	if waited := time.Since(j.recv); waited > s.timeout {
		s.wc.Released(j.est)
		s.deliver(j, &dataplanepb.FetchResponse{
			Tag:    j.req.GetTag(),
			Sample: j.req.GetSample(),
			Error: &dataplanepb.SampleError{
				Kind:    dataplanepb.ErrorKind_ERROR_KIND_DEADLINE,
				Message: fmt.Sprintf("sample %d: waited %v in the queue, past the %v request timeout", j.req.GetSample(), waited.Round(time.Microsecond), s.timeout),
			},
		})
		return 0
	}
	if s.beforeJob != nil {
		s.beforeJob()
	}
	start := time.Now()
	t0 := cpuclock.Thread()
	data, served, err := s.process(j)
	busy := cpuclock.Thread() - t0
	if j.pre != nil {
		<-j.pre.done
		busy += j.pre.busy // the read's CPU is the job's, on whichever thread
	}
	wall := time.Since(start)
	s.m.cpu.Add(busy.Seconds())
	var resp *dataplanepb.FetchResponse
	if err != nil {
		resp = s.failure(j.st.peer, j.req, err)
	} else {
		resp = &dataplanepb.FetchResponse{Tag: j.req.GetTag(), Sample: j.req.GetSample(), Data: data, Served: served}
	}
	resp.StorageCpuNs = uint64(max(busy, 0))
	if !j.raw() {
		b := budget.Time(busy, wall, late, s.share)
		resp.StorageBudgetNs = uint64(b)
		if j.est > 0 {
			s.wc.Finished(j.est, busy, b)
		}
	}
	s.deliver(j, resp)
	return busy
}

// process reads the job's sample, runs ops[0:split] (or cuts it) and
// encodes the result, saying in which form it is served. j.pipe is nil only
// for split 0 without a cut.
func (s *server) process(j *job) ([]byte, dataplanepb.Served, error) {
	req, p := j.req, j.pipe
	i, split := req.GetSample(), int(req.GetSplit())
	if j.served == dataplanepb.Served_SERVED_RAW_CONTENDED {
		out, err := s.processRaw(i)
		return out, j.served, err
	}
	if split > 0 && split > p.Len() {
		return nil, 0, fmt.Errorf("%w: split %d, %s has %d ops", ops.ErrSplit, split, p.ID(), p.Len())
	}
	if split > 0 && req.GetCut() {
		return nil, 0, fmt.Errorf("%w: a cut is split 0 with cut set, not split %d", ops.ErrSplit, split)
	}
	if c := req.GetCodec(); c > dataplanepb.Codec_CODEC_S2 {
		return nil, 0, fmt.Errorf("%w: unknown codec %v", ops.ErrSpec, c)
	}
	if isRaw(req) {
		out, err := s.processRaw(i)
		return out, 0, err
	}
	if err := s.checkRawSize(i); err != nil {
		return nil, 0, err
	}
	raw, err := j.read(s.ds)
	if err != nil {
		return nil, 0, err
	}
	var v ops.Value = ops.Encoded(raw)
	served := dataplanepb.Served_SERVED_AS_REQUESTED
	key := ops.Key{Seed: req.GetSeed(), Epoch: req.GetEpoch(), Sample: i}
	lim := s.limits
	lim.Deadline = time.Now().Add(s.opTimeout)
	// NB: the result is refused before any op runs when its uncompressed
	// payload could not be sent, whatever the codec: a client spec must
	// not make the agent compute what the message limit refuses.
	lim.MaxResultBytes = int64(s.maxWire)
	switch {
	case req.GetCut():
		c, err := p.Cut(key, raw, lim)
		switch {
		case errors.Is(err, ops.ErrCannotCut):
			// Not an error: the sample crosses raw, the compute agent
			// runs every op, and the model sees the same bytes.
			served = dataplanepb.Served_SERVED_RAW_UNCUTTABLE
			s.m.served.WithLabelValues("uncuttable").Inc()
		case err != nil:
			return nil, 0, err
		default:
			v = c
		}
	case split > 0:
		v, err = p.RunLimited(key, v, 0, split, lim)
		if err != nil {
			return nil, 0, err
		}
	}
	codec := wireform.Codec(req.GetCodec())
	if served != dataplanepb.Served_SERVED_AS_REQUESTED {
		codec = wireform.CodecNone
	}
	out, err := wireform.Encode(v, codec)
	if err != nil {
		return nil, 0, err
	}
	if len(out) > s.maxWire {
		return nil, 0, fmt.Errorf("%w: the intermediate at split %d is %d bytes, above the %d-byte message limit", ops.ErrTooLarge, split, len(out), s.maxWire)
	}
	return out, served, nil
}

// processRaw serves an uncompressed raw fetch, the hot path of a No-Off
// epoch: the file is read straight into its wire form.
func (s *server) processRaw(i uint64) ([]byte, error) {
	if err := s.checkRawSize(i); err != nil {
		return nil, err
	}
	form, payload, err := wireform.NewEncoded(int(s.ds.RawSize(i)))
	if err != nil {
		return nil, err
	}
	if err := s.ds.ReadInto(i, payload); err != nil {
		return nil, err
	}
	wireform.Seal(form)
	return form, nil
}

// checkRawSize refuses, as TOO_LARGE, a sample whose raw file could not
// cross in one message uncompressed. NB: it runs at every split, cut and
// codec, not only for a raw fetch: a 70 MiB file that splits 1-2 would
// shrink to a small intermediate could not be fetched raw, nor its cut
// refetched raw, nor run by the compute agent, so serving it offloaded
// would make whether the model sees it depend on the plan. Refused
// everywhere, the sample fails the same way under every plan, before
// it is read (the catalog's size). An index past the catalog is
// NOT_FOUND.
func (s *server) checkRawSize(i uint64) error {
	if i >= uint64(s.ds.Len()) {
		return fmt.Errorf("sample %d: %w (the catalog holds %d)", i, dataset.ErrNotFound, s.ds.Len())
	}
	n := s.ds.RawSize(i)
	if n > dataset.MaxSampleBytes {
		return fmt.Errorf("sample %d (%s): %w: %d bytes, limit %d", i, s.ds.Path(i), ops.ErrTooLarge, n, dataset.MaxSampleBytes)
	}
	if w := wireform.EncodedLen(int(n)); w > s.maxWire {
		return fmt.Errorf("sample %d (%s): %w: the file is %d bytes, %d on the wire raw, above the %d-byte message limit (refused at every split, so that no plan serves it)",
			i, s.ds.Path(i), ops.ErrTooLarge, n, w, s.maxWire)
	}
	return nil
}

// failure turns err into the request's error response.
func (s *server) failure(peer string, req *dataplanepb.FetchRequest, err error) *dataplanepb.FetchResponse {
	kind := errorKind(err)
	msg := err.Error()
	if !strings.HasPrefix(msg, "sample ") { // ops' and the dataset's errors name it already
		msg = fmt.Sprintf("sample %d: %s", req.GetSample(), msg)
	}
	if i := req.GetSample(); i < s.ds.Len() && !strings.Contains(msg, s.ds.Path(i)) {
		// The message names the file as well: "sample 7 (cats/7.jpg): ...".
		head := fmt.Sprintf("sample %d", i)
		if rest, ok := strings.CutPrefix(msg, head); ok {
			msg = fmt.Sprintf("%s (%s)%s", head, s.ds.Path(i), rest)
		} else {
			msg = fmt.Sprintf("sample %d (%s): %s", i, s.ds.Path(i), msg)
		}
	}
	// The operator's log names the file too; bursts are sampled, so that
	// a client asking for bad samples over and over cannot flood it. An
	// invalid request is the client's doing: a warning, rate-limited per
	// peer and reason and counted (internal/peerlog).
	var ev *zerolog.Event
	switch kind {
	case dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST:
		ev = s.peer.WarnPeer(s.log, peerlog.BadRequest, peer).Str("peer", peer)
	case dataplanepb.ErrorKind_ERROR_KIND_IO, dataplanepb.ErrorKind_ERROR_KIND_INTERNAL:
		ev = s.failLog.Warn()
	default:
		ev = s.failLog.Info()
	}
	if i := req.GetSample(); ev != nil && i < s.ds.Len() {
		ev = ev.Str("file", s.ds.Path(i))
	}
	ev.Uint64("sample", req.GetSample()).Str("kind", kindLabel(kind)).Err(err).Msg("fetch failed")
	return &dataplanepb.FetchResponse{
		Tag:    req.GetTag(),
		Sample: req.GetSample(),
		Error:  &dataplanepb.SampleError{Kind: kind, Message: msg},
	}
}

// errorKind maps the dataset's and the op library's sentinel errors to the
// wire's error kinds.
func errorKind(err error) dataplanepb.ErrorKind {
	return errkind.Of(err,
		errkind.Pair{Err: dataset.ErrNotFound, Kind: dataplanepb.ErrorKind_ERROR_KIND_NOT_FOUND},
		errkind.Pair{Err: dataset.ErrNotStored, Kind: dataplanepb.ErrorKind_ERROR_KIND_NOT_FOUND},
		errkind.Pair{Err: dataset.ErrRead, Kind: dataplanepb.ErrorKind_ERROR_KIND_IO},
		errkind.Pair{Err: dataset.ErrClosed, Kind: dataplanepb.ErrorKind_ERROR_KIND_IO},
	)
}
