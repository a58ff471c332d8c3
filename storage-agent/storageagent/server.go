package storageagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

var _ dataplanepb.StorageServer = (*server)(nil)

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
	// wireSlack is room left in a gRPC message for the response's other
	// fields.
	wireSlack = 4 << 10
)

// server implements the Storage service over a dataset. Requests from all
// streams share one queue and one worker pool (see pool.go).
type server struct {
	dataplanepb.UnimplementedStorageServer

	ds      *Dataset
	name    string
	version string
	cpus    float64
	share   float64 // each worker's share of a core
	timeout time.Duration
	pending int // results a stream may hold before workers block
	maxWire int // the largest wire form a response may carry
	log     zerolog.Logger
	m       *metrics

	queue chan *job
	// raw holds uncompressed split-0 fetches, which run no ops; rawWorker
	// serves them outside the CPU budget (see pool.go).
	raw     chan *job
	presets map[string]*ops.Pipeline

	mu    sync.Mutex
	cache map[string]*ops.Pipeline // built from client specs, by ID
}

// job is one queued request.
type job struct {
	st   *fetchStream
	req  *dataplanepb.FetchRequest
	pipe *ops.Pipeline
	recv time.Time // when the request was received
}

// fetchStream is the state one Fetch call shares with the workers.
type fetchStream struct {
	ctx context.Context // ends when the stream does
	// results carries the budgeted workers' responses, raw the raw
	// workers'; the sender prefers results: a budgeted worker waiting to
	// hand over its response is CPU budget unused, while a raw worker
	// waiting costs nothing (the link is busy meanwhile).
	results, raw chan result
	pending      sync.WaitGroup // requests taken in but not yet delivered or dropped
}

// result is a response and the split it was cut at (for the metrics).
type result struct {
	resp  *dataplanepb.FetchResponse
	split uint32
}

func newServer(ds *Dataset, cfg Config, workers int, share float64) (*server, error) {
	s := &server{
		ds:      ds,
		name:    cfg.Name,
		version: cfg.Version,
		cpus:    cfg.CPUs,
		share:   share,
		timeout: cfg.RequestTimeout,
		pending: workers,
		maxWire: MaxMessageBytes - wireSlack,
		log:     cfg.Logger,
		queue:   make(chan *job, cfg.Queue),
		raw:     make(chan *job, cfg.Queue),
		presets: map[string]*ops.Pipeline{},
		cache:   map[string]*ops.Pipeline{},
	}
	s.m = newMetrics(func() float64 { return float64(len(s.queue) + len(s.raw)) })
	for _, name := range ops.PresetNames() {
		p, err := ops.Preset(name)
		if err != nil {
			return nil, fmt.Errorf("storageagent: preset %s: %w", name, err)
		}
		s.presets[p.ID()] = p
	}
	return s, nil
}

// Info describes the agent.
func (s *server) Info(context.Context, *dataplanepb.InfoRequest) (*dataplanepb.InfoResponse, error) {
	return &dataplanepb.InfoResponse{
		Node:        s.name,
		Version:     s.version,
		Fingerprint: s.ds.Fingerprint(),
		Cpus:        s.cpus,
		Samples:     s.ds.Len(),
	}, nil
}

// Catalog streams labels, raw sizes and content hashes in pages; the first
// page also carries the fingerprint, the total, the class names and the
// paths digest.
func (s *server) Catalog(req *dataplanepb.CatalogRequest, stream grpc.ServerStreamingServer[dataplanepb.CatalogPage]) error {
	size := uint64(req.GetPageSize())
	if size == 0 {
		size = defaultCatalogPage
	}
	size = min(size, maxCatalogPage)
	n := s.ds.Len()
	for first := uint64(0); first == 0 || first < n; first += size {
		end := min(first+size, n)
		page := &dataplanepb.CatalogPage{
			First:    first,
			Labels:   make([]uint32, 0, end-first),
			RawSizes: make([]uint64, 0, end-first),
			// 32 bytes per sample: SHA-256 of its raw bytes.
			ContentHashes: make([]byte, 0, 32*(end-first)),
		}
		if first == 0 {
			page.Fingerprint = s.ds.Fingerprint()
			page.Total = n
			page.ClassNames = s.ds.ClassNames()
			pd := s.ds.PathsDigest()
			page.PathsDigest = pd[:]
		}
		for i := first; i < end; i++ {
			page.Labels = append(page.Labels, s.ds.Label(i))
			page.RawSizes = append(page.RawSizes, s.ds.RawSize(i))
			h := s.ds.ContentHash(i)
			page.ContentHashes = append(page.ContentHashes, h[:]...)
		}
		if err := stream.Send(page); err != nil {
			return err
		}
	}
	return nil
}

// Fetch serves one stream. The calling goroutine receives requests and
// queues them; workers deliver results into the stream's bounded results
// channel; one sender goroutine sends them as they come. When the client
// stops reading, the sender blocks, results fill, workers block, the queue
// fills and this loop stops receiving, so memory stays bounded. When the
// client half-closes, outstanding requests are answered before Fetch
// returns; when the stream is cancelled, they are dropped.
func (s *server) Fetch(stream grpc.BidiStreamingServer[dataplanepb.FetchRequest, dataplanepb.FetchResponse]) error {
	s.m.streams.Inc()
	defer s.m.streams.Dec()
	log := s.log
	if p, ok := peer.FromContext(stream.Context()); ok {
		log = log.With().Str("peer", p.Addr.String()).Logger()
	}
	log.Debug().Msg("fetch stream opened")
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	st := &fetchStream{ctx: ctx, results: make(chan result, s.pending), raw: make(chan result, RawWorkers)}

	var wg sync.WaitGroup
	var sendErr error
	wg.Go(func() {
		sendErr = s.send(ctx, stream, st.results, st.raw)
		if sendErr != nil {
			cancel()
		}
	})
	recvErr := s.receive(ctx, stream, st)
	if recvErr != nil {
		cancel()
	}
	st.pending.Wait()
	close(st.results)
	close(st.raw)
	wg.Wait()
	log.Debug().AnErr("recv", recvErr).AnErr("send", sendErr).Msg("fetch stream closed")
	if sendErr != nil {
		return sendErr
	}
	if recvErr != nil && !errors.Is(recvErr, context.Canceled) {
		return recvErr
	}
	return ctx.Err()
}

// send sends results until both channels are closed or ctx ends, taking
// from first whenever it has a result ready.
func (s *server) send(ctx context.Context, stream grpc.BidiStreamingServer[dataplanepb.FetchRequest, dataplanepb.FetchResponse], first, second <-chan result) error {
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
		if err := stream.Send(r.resp); err != nil {
			return err
		}
		if r.resp.Error == nil {
			s.m.sent(r.split, len(r.resp.Data))
		}
	}
	return nil
}

// receive reads requests until the client half-closes (nil) or the stream
// fails. Pipelines whose spec came on this stream are remembered in local.
func (s *server) receive(ctx context.Context, stream grpc.BidiStreamingServer[dataplanepb.FetchRequest, dataplanepb.FetchResponse], st *fetchStream) error {
	local := map[string]*ops.Pipeline{}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		j := &job{st: st, req: req, recv: time.Now()}
		st.pending.Add(1)
		// A raw fetch needs no pipeline (any replica serves a retry at
		// split 0), unless the request sends a spec, which is checked.
		if req.GetSplit() > 0 || len(req.GetPipelineSpec()) > 0 {
			if j.pipe, err = s.resolve(req, local); err != nil {
				s.deliver(j, s.failure(req, err))
				continue
			}
		}
		q := s.queue
		if isRaw(req) {
			q = s.raw
		}
		select {
		case q <- j:
		case <-ctx.Done():
			st.pending.Done()
			return ctx.Err()
		}
	}
}

// resolve finds the request's pipeline: a preset by ID, one whose spec the
// request carries (which must hash to the ID), or one built earlier from a
// spec on this stream or on another.
func (s *server) resolve(req *dataplanepb.FetchRequest, local map[string]*ops.Pipeline) (*ops.Pipeline, error) {
	id := req.GetPipelineId()
	if p := s.presets[id]; p != nil {
		return p, nil
	}
	if spec := req.GetPipelineSpec(); len(spec) > 0 {
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
	return nil, fmt.Errorf("%w: unknown pipeline %q: not a preset; send its spec with the request", ops.ErrSpec, id)
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
	if isRaw(j.req) {
		ch = j.st.raw
	}
	select {
	case ch <- result{resp: resp, split: j.req.GetSplit()}:
	case <-j.st.ctx.Done():
	}
}

// handle runs one job on the calling worker and returns the thread CPU
// time it took.
func (s *server) handle(j *job, late time.Duration) time.Duration {
	if j.st.ctx.Err() != nil {
		j.st.pending.Done() // the stream is gone: drop
		return 0
	}
	if waited := time.Since(j.recv); waited > s.timeout {
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
	start := time.Now()
	t0 := threadCPU()
	data, err := s.process(j.req, j.pipe)
	busy := threadCPU() - t0
	wall := time.Since(start)
	s.m.cpu.Add(busy.Seconds())
	var resp *dataplanepb.FetchResponse
	if err != nil {
		resp = s.failure(j.req, err)
	} else {
		resp = &dataplanepb.FetchResponse{Tag: j.req.GetTag(), Sample: j.req.GetSample(), Data: data}
	}
	resp.StorageCpuNs = uint64(max(busy, 0))
	if !isRaw(j.req) {
		resp.StorageBudgetNs = uint64(budgetTime(busy, wall, late, s.share))
	}
	s.deliver(j, resp)
	return busy
}

// process reads the sample, runs ops[0:split] and encodes the result. p is
// nil only for split 0.
func (s *server) process(req *dataplanepb.FetchRequest, p *ops.Pipeline) ([]byte, error) {
	i, split := req.GetSample(), int(req.GetSplit())
	if split > 0 && split > p.Len() {
		return nil, fmt.Errorf("%w: split %d, %s has %d ops", ops.ErrSplit, split, p.ID(), p.Len())
	}
	if c := req.GetCodec(); c > dataplanepb.Codec_CODEC_S2 {
		return nil, fmt.Errorf("%w: unknown codec %v", ops.ErrSpec, c)
	}
	if split == 0 && req.GetCodec() == dataplanepb.Codec_CODEC_NONE {
		return s.processRaw(i)
	}
	raw, err := s.ds.Read(i)
	if err != nil {
		return nil, err
	}
	var v ops.Value = ops.Encoded(raw)
	if split > 0 {
		v, err = p.Run(ops.Key{Seed: req.GetSeed(), Epoch: req.GetEpoch(), Sample: i}, v, 0, split)
		if err != nil {
			return nil, err
		}
	}
	out, err := ops.EncodeWire(v, ops.Codec(req.GetCodec()))
	if err != nil {
		return nil, err
	}
	if len(out) > s.maxWire {
		return nil, fmt.Errorf("%w: the intermediate at split %d is %d bytes, above the %d-byte message limit", ops.ErrTooLarge, split, len(out), s.maxWire)
	}
	return out, nil
}

// processRaw serves an uncompressed raw fetch, the hot path of a No-Off
// epoch: the file is read straight into its wire form.
func (s *server) processRaw(i uint64) ([]byte, error) {
	if i >= uint64(s.ds.Len()) {
		return nil, fmt.Errorf("sample %d: %w (the catalog holds %d)", i, ErrNotFound, s.ds.Len())
	}
	n := s.ds.RawSize(i)
	if n > MaxSampleBytes {
		return nil, fmt.Errorf("sample %d (%s): %w: %d bytes, limit %d", i, s.ds.Path(i), ops.ErrTooLarge, n, MaxSampleBytes)
	}
	form, payload, err := ops.NewEncodedWire(int(n))
	if err != nil {
		return nil, err
	}
	if err := s.ds.ReadInto(i, payload); err != nil {
		return nil, err
	}
	ops.SealWire(form)
	if len(form) > s.maxWire {
		return nil, fmt.Errorf("%w: sample %d is %d bytes on the wire, above the %d-byte message limit", ops.ErrTooLarge, i, len(form), s.maxWire)
	}
	return form, nil
}

// failure turns err into the request's error response.
func (s *server) failure(req *dataplanepb.FetchRequest, err error) *dataplanepb.FetchResponse {
	kind := errorKind(err)
	msg := err.Error()
	if !strings.HasPrefix(msg, "sample ") { // ops' and the dataset's errors name it already
		msg = fmt.Sprintf("sample %d: %s", req.GetSample(), msg)
	}
	if kind == dataplanepb.ErrorKind_ERROR_KIND_IO || kind == dataplanepb.ErrorKind_ERROR_KIND_INTERNAL {
		s.log.Warn().Uint64("sample", req.GetSample()).Err(err).Msg("fetch failed")
	} else {
		s.log.Debug().Uint64("sample", req.GetSample()).Str("kind", kindLabel(kind)).Err(err).Msg("fetch failed")
	}
	return &dataplanepb.FetchResponse{
		Tag:    req.GetTag(),
		Sample: req.GetSample(),
		Error:  &dataplanepb.SampleError{Kind: kind, Message: msg},
	}
}

// errorKind maps the dataset's and the op library's sentinel errors to the
// wire's error kinds.
func errorKind(err error) dataplanepb.ErrorKind {
	for _, m := range []struct {
		err  error
		kind dataplanepb.ErrorKind
	}{
		{ErrNotFound, dataplanepb.ErrorKind_ERROR_KIND_NOT_FOUND},
		{ops.ErrEmpty, dataplanepb.ErrorKind_ERROR_KIND_EMPTY},
		{ops.ErrNotJPEG, dataplanepb.ErrorKind_ERROR_KIND_NOT_JPEG},
		{ops.ErrTruncated, dataplanepb.ErrorKind_ERROR_KIND_TRUNCATED},
		{ops.ErrCorrupt, dataplanepb.ErrorKind_ERROR_KIND_CORRUPT},
		{ops.ErrTooLarge, dataplanepb.ErrorKind_ERROR_KIND_TOO_LARGE},
		{ops.ErrUnsupported, dataplanepb.ErrorKind_ERROR_KIND_UNSUPPORTED},
		{ops.ErrSplit, dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST},
		{ops.ErrSpec, dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST},
		{ops.ErrKind, dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST},
		{ErrRead, dataplanepb.ErrorKind_ERROR_KIND_IO},
		{ErrClosed, dataplanepb.ErrorKind_ERROR_KIND_IO},
	} {
		if errors.Is(err, m.err) {
			return m.kind
		}
	}
	return dataplanepb.ErrorKind_ERROR_KIND_INTERNAL
}
