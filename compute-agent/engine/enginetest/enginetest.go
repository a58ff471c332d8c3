// Package enginetest is an in-memory storage agent for the compute
// agent's tests: Storage serves the real pipeline's prefix over the
// dataplane API with hooks for faults (slow samples, failing and dying
// streams, deadlines, forged catalogs, a shaped link), and MemNet serves it
// over bufconn, so that the engine and the agent run end to end without a
// network.
package enginetest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Spec is a small imagenet-train: 24x24 crops keep the tests fast.
var Spec = ops.Spec{Name: "test-train", Ops: []ops.OpSpec{
	{Op: "decode"},
	{Op: "random_resized_crop", Size: []int{24, 24}},
	{Op: "random_horizontal_flip"},
	{Op: "to_tensor"},
	{Op: "normalize", Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}},
}}

// Pipeline is Spec built.
func Pipeline(t testing.TB) *ops.Pipeline {
	t.Helper()
	p, err := Spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Samples is the number of samples of Dataset.
const Samples = 64

var (
	datasetOnce sync.Once
	dataset     [][]byte
	datasetErr  error
)

// Dataset is Samples small synthetic JPEGs of varied sizes.
func Dataset(t testing.TB) [][]byte {
	t.Helper()
	datasetOnce.Do(func() {
		for i := range Samples {
			b, err := synth.JPEG(uint64(i), 40+8*(i%5), 32+8*(i%3), synth.Options{})
			if err != nil {
				datasetErr = err
				return
			}
			dataset = append(dataset, b)
		}
	})
	if datasetErr != nil {
		t.Fatal(datasetErr)
	}
	return dataset
}

// Storage is an in-memory storage agent that runs the real pipeline
// prefix, with hooks for slow samples, failing streams and forged
// catalogs, and counters of what it saw. Set its fields before serving it.
type Storage struct {
	dataplanepb.UnimplementedStorageServer
	// Name is the node name Info announces.
	Name string
	// Pipe is the pipeline whose prefix it runs; requests for another
	// pipeline fail with BAD_REQUEST.
	Pipe *ops.Pipeline
	// Data is the encoded samples, by id.
	Data [][]byte
	// Fingerprint, when set, is what Info announces instead of the
	// catalog's true fingerprint (the catalog always sends the true one).
	Fingerprint string
	// CatData, when set, is what the catalog's content hashes describe
	// (a rogue agent serving data under another's catalog). Nil means
	// Data.
	CatData [][]byte
	// ForgeFP, when set, is the fingerprint the catalog claims.
	ForgeFP string
	// Paths, when set, are the sample paths the catalog's digest covers
	// and its pages carry; SentPaths, when set, are what the pages carry
	// instead. Nil Paths: the pages carry none, under DefaultPathsDigest.
	Paths, SentPaths []string

	// Hold holds the listed samples back until their channel is closed
	// (or the stream ends) before answering.
	Hold map[uint64]<-chan struct{}
	// Sent, when set, is called after each response is sent with the
	// count of responses over the server's life (the n of FailAt).
	Sent func(n int64)
	// FailAt aborts the stream that sends the n-th response (counted over
	// the server's life), before sending it; each listed n fires once.
	FailAt map[int64]bool
	// FailAlways aborts every stream on its first request.
	FailAlways bool
	// Deadlines answers the first n requests for each listed sample with
	// ERROR_KIND_DEADLINE.
	Deadlines map[uint64]int
	// LinkBPS, when set, throttles each stream's responses to that many
	// bytes per second, by the request's epoch (a shaped link).
	LinkBPS func(epoch uint64) float64
	// CPUs is announced by Info. Zero means 1.
	CPUs float64
	// Contended, when set, answers the offloads with fallback that it
	// picks raw, as a storage agent short of CPU does.
	Contended func(sample uint64) bool
	// InfoErr, when set, is Info's error (nil: answer).
	InfoErr func() error
	// Layout and Held, when set, are the shard layout and the shards Info
	// announces.
	Layout []*dataplanepb.ShardRange
	Held   []uint32
	// BadCut, when set, damages the cuts of the samples it picks (half
	// their JPEG is cut off): a cut that does not decode.
	BadCut func(sample uint64) bool
	// DieAt, when positive, kills the agent at its DieAt-th response:
	// that stream and every later one abort, and Info fails.
	DieAt int64
	dead  atomic.Bool

	responses atomic.Int64
	requests  atomic.Int64
	wg        sync.WaitGroup // reader goroutines outliving their handler

	mu          sync.Mutex
	inflight    int // requests received and not yet answered, all streams
	maxInflight int
}

var _ dataplanepb.StorageServer = (*Storage)(nil)

// NewStorage is a Storage named name that serves Dataset under Pipeline.
func NewStorage(t testing.TB, name string) *Storage {
	return &Storage{Name: name, Pipe: Pipeline(t), Data: Dataset(t)}
}

// Responses is the responses s sent, over its life.
func (s *Storage) Responses() int64 { return s.responses.Load() }

// Requests is the requests s received, over its life.
func (s *Storage) Requests() int64 { return s.requests.Load() }

// MaxInflight is the most requests s held at once, all streams together.
func (s *Storage) MaxInflight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInflight
}

// Wait waits for the stream readers that outlived their handler; MemNet
// calls it when the test ends.
func (s *Storage) Wait() { s.wg.Wait() }

// DefaultPathsDigest stands for the digest of the sample paths of a
// Storage without Paths.
var DefaultPathsDigest = sha256.Sum256([]byte("fake paths"))

// catalogData is what the catalog describes.
func (s *Storage) catalogData() [][]byte {
	if s.CatData != nil {
		return s.CatData
	}
	return s.Data
}

// CatalogFingerprint is the fingerprint of the catalog s serves.
func (s *Storage) CatalogFingerprint() string {
	pd := s.PathsDigest()
	fp := dataplanepb.NewFingerprinter(pd[:])
	for i, b := range s.catalogData() {
		fp.Add(uint64(len(b)), uint32(i%3), sha256.Sum256(b))
	}
	return fp.Sum()
}

// PathsDigest is the digest of Paths, or DefaultPathsDigest without them.
func (s *Storage) PathsDigest() [32]byte {
	if s.Paths == nil {
		return DefaultPathsDigest
	}
	h := sha256.New()
	for _, p := range s.Paths {
		h.Write(append([]byte(p), 0))
	}
	return [32]byte(h.Sum(nil))
}

// Info announces s (see Fingerprint, CPUs, Layout, InfoErr, DieAt).
func (s *Storage) Info(context.Context, *dataplanepb.InfoRequest) (*dataplanepb.InfoResponse, error) {
	if s.InfoErr != nil {
		if err := s.InfoErr(); err != nil {
			return nil, err
		}
	}
	if s.dead.Load() {
		return nil, status.Error(codes.Unavailable, "enginetest: dead")
	}
	return &dataplanepb.InfoResponse{Node: s.Name, Version: "test", Fingerprint: cmp.Or(s.Fingerprint, s.CatalogFingerprint()), Cpus: max(s.CPUs, 1),
		Samples: uint64(len(s.Data)), Layout: s.Layout, HeldShards: s.Held}, nil
}

// Catalog sends the catalog of CatData (else Data) in pages of 10.
func (s *Storage) Catalog(req *dataplanepb.CatalogRequest, stream dataplanepb.Storage_CatalogServer) error {
	// Pages of 10 exercise the paging.
	for first := 0; first < len(s.Data) || first == 0; first += 10 {
		page := &dataplanepb.CatalogPage{First: uint64(first)}
		if first == 0 {
			page.Fingerprint, page.Total, page.ClassNames = cmp.Or(s.ForgeFP, s.CatalogFingerprint()), uint64(len(s.Data)), []string{"a", "b", "c"}
			pd := s.PathsDigest()
			page.PathsDigest = pd[:]
		}
		sent := s.Paths
		if s.SentPaths != nil {
			sent = s.SentPaths
		}
		for i := first; i < min(first+10, len(s.Data)); i++ {
			b := s.catalogData()[i]
			h := sha256.Sum256(b)
			page.Labels = append(page.Labels, uint32(i%3))
			page.RawSizes = append(page.RawSizes, uint64(len(b)))
			page.ContentHashes = append(page.ContentHashes, h[:]...)
			if sent != nil {
				page.Paths = append(page.Paths, []byte(sent[i]))
			}
		}
		if err := stream.Send(page); err != nil {
			return err
		}
		if len(s.Data) == 0 {
			break
		}
	}
	return nil
}

func (s *Storage) addInflight(d int) {
	s.mu.Lock()
	s.inflight += d
	s.maxInflight = max(s.maxInflight, s.inflight)
	s.mu.Unlock()
}

// Fetch answers each request from its own goroutine. The reader runs
// apart from the handler, which can then return (ending the stream) while
// the reader is blocked in Recv; the reader is owned by s.wg.
func (s *Storage) Fetch(stream dataplanepb.Storage_FetchServer) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	reqs := make(chan *dataplanepb.FetchRequest)
	s.wg.Go(func() {
		defer close(reqs)
		for {
			req, err := stream.Recv()
			if err != nil {
				if err != io.EOF {
					cancel(err)
				}
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	})
	var workers sync.WaitGroup
	var sendMu sync.Mutex
loop:
	for {
		var req *dataplanepb.FetchRequest
		select {
		case r, ok := <-reqs:
			if !ok {
				break loop
			}
			req = r
		case <-ctx.Done():
			break loop
		}
		s.requests.Add(1)
		if s.FailAlways || s.dead.Load() {
			cancel(status.Error(codes.Unavailable, "enginetest: always failing"))
			break
		}
		s.addInflight(1)
		workers.Go(func() { s.respond(ctx, cancel, stream, &sendMu, req) })
	}
	workers.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// respond serves req and sends its response on stream, one sender at a
// time (sendMu), unless a fault hook aborts the stream (cancel) first.
func (s *Storage) respond(ctx context.Context, cancel context.CancelCauseFunc, stream dataplanepb.Storage_FetchServer, sendMu *sync.Mutex, req *dataplanepb.FetchRequest) {
	resp := s.serve(ctx, req)
	sendMu.Lock()
	defer sendMu.Unlock()
	s.addInflight(-1)
	if ctx.Err() != nil {
		return
	}
	if s.DieAt > 0 && s.responses.Load() >= s.DieAt-1 {
		s.dead.Store(true)
	}
	if s.dead.Load() {
		cancel(status.Error(codes.Unavailable, "enginetest: died"))
		return
	}
	n := s.responses.Add(1)
	s.mu.Lock()
	fail := s.FailAt[n]
	delete(s.FailAt, n)
	s.mu.Unlock()
	if fail {
		cancel(status.Errorf(codes.Unavailable, "enginetest: injected failure at response %d", n))
		return
	}
	if s.LinkBPS != nil {
		d := time.Duration(float64(len(resp.GetData())) / s.LinkBPS(req.GetEpoch()) * float64(time.Second))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
	}
	if err := stream.Send(resp); err != nil {
		cancel(err)
		return
	}
	if s.Sent != nil {
		s.Sent(n)
	}
}

func (s *Storage) serve(ctx context.Context, req *dataplanepb.FetchRequest) *dataplanepb.FetchResponse {
	resp := &dataplanepb.FetchResponse{Tag: req.GetTag(), Sample: req.GetSample()}
	fail := func(kind string, msg string) *dataplanepb.FetchResponse {
		resp.Error = &dataplanepb.SampleError{Kind: dataplanepb.ErrorKind(dataplanepb.ErrorKind_value["ERROR_KIND_"+kind]), Message: msg}
		return resp
	}
	if h := s.Hold[req.GetSample()]; h != nil {
		select {
		case <-h:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	if s.Deadlines[req.GetSample()] > 0 {
		s.Deadlines[req.GetSample()]--
		s.mu.Unlock()
		return fail("DEADLINE", "enginetest: queue deadline")
	}
	s.mu.Unlock()
	if req.GetSample() >= uint64(len(s.Data)) {
		return fail("NOT_FOUND", "no such sample")
	}
	if req.GetPipelineId() != s.Pipe.ID() {
		return fail("BAD_REQUEST", "unknown pipeline "+req.GetPipelineId())
	}
	start := time.Now()
	key := ops.Key{Seed: req.GetSeed(), Epoch: req.GetEpoch(), Sample: req.GetSample()}
	raw := ops.Encoded(s.Data[req.GetSample()])
	var v ops.Value
	var err error
	switch {
	case req.GetFallback() && s.Contended != nil && s.Contended(req.GetSample()):
		v, resp.Served = raw, dataplanepb.Served_SERVED_RAW_CONTENDED
	case req.GetCut():
		v, err = s.Pipe.Cut(key, raw, ops.Limits{})
		if errors.Is(err, ops.ErrCannotCut) {
			v, err, resp.Served = raw, nil, dataplanepb.Served_SERVED_RAW_UNCUTTABLE
		}
		if c, ok := v.(*ops.CutJPEG); ok && s.BadCut != nil && s.BadCut(req.GetSample()) {
			bad := *c
			bad.Data = bad.Data[:len(bad.Data)/2]
			v = &bad
		}
	default:
		v, err = s.Pipe.Run(key, raw, 0, int(req.GetSplit()))
	}
	if err != nil {
		return fail(engine.LocalKind(err), err.Error())
	}
	b, err := wireform.Encode(v, wireform.Codec(req.GetCodec()))
	if err != nil {
		return fail("INTERNAL", err.Error())
	}
	resp.Data, resp.StorageCpuNs = b, uint64(time.Since(start))
	return resp
}

// MemNet serves gRPC servers over bufconn, by address; its Dial is the
// compute agent's dialer (computeagent.Knobs).
type MemNet struct {
	mu  sync.Mutex
	lis map[string]*bufconn.Listener
}

func (n *MemNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.lis[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("memnet: nothing at %s", addr)
	}
	return l.DialContext(ctx)
}

// Serve starts srv at addr until the test ends.
func (n *MemNet) Serve(t testing.TB, addr string, srv dataplanepb.StorageServer) {
	t.Helper()
	n.ServeOn(t, addr, srv, bufconn.Listen(1<<20), nil)
}

// ServeOn is Serve on l, whose accepted connections wrap wraps (nil: as
// they are).
func (n *MemNet) ServeOn(t testing.TB, addr string, srv dataplanepb.StorageServer, l *bufconn.Listener, wrap func(net.Listener) net.Listener) {
	t.Helper()
	n.mu.Lock()
	if n.lis == nil {
		n.lis = map[string]*bufconn.Listener{}
	}
	n.lis[addr] = l
	n.mu.Unlock()
	gs := grpc.NewServer()
	dataplanepb.RegisterStorageServer(gs, srv)
	var lis net.Listener = l
	if wrap != nil {
		lis = wrap(l)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	t.Cleanup(func() {
		gs.Stop()
		wg.Wait()
		if f, ok := srv.(*Storage); ok {
			f.Wait()
		}
	})
}
