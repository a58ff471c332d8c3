package computeagent

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

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// testSpec is a small imagenet-train: 24x24 crops keep the tests fast.
var testSpec = ops.Spec{Name: "test-train", Ops: []ops.OpSpec{
	{Op: "decode"},
	{Op: "random_resized_crop", Size: []int{24, 24}},
	{Op: "random_horizontal_flip"},
	{Op: "to_tensor"},
	{Op: "normalize", Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}},
}}

func testPipeline(t testing.TB) *ops.Pipeline {
	t.Helper()
	p, err := testSpec.Build()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const testSamples = 64

var (
	datasetOnce sync.Once
	dataset     [][]byte
	datasetErr  error
)

// testDataset is testSamples small synthetic JPEGs of varied sizes.
func testDataset(t testing.TB) [][]byte {
	t.Helper()
	datasetOnce.Do(func() {
		for i := range testSamples {
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

// fakeStorage is an in-memory storage agent that runs the real pipeline
// prefix, with hooks for slow samples and failing streams, and counters of
// what it saw.
type fakeStorage struct {
	dataplanepb.UnimplementedStorageServer
	name string
	p    *ops.Pipeline
	data [][]byte
	// fingerprint, when set, is what Info announces instead of the
	// catalog's true fingerprint (the catalog always sends the true one).
	fingerprint string
	// catData, when set, is what the catalog's content hashes describe
	// (a rogue agent serving data under another's catalog). Nil means
	// data.
	catData [][]byte
	// forgeFP, when set, is the fingerprint the catalog claims.
	forgeFP string
	// paths, when set, are the sample paths the catalog's digest covers
	// and its pages carry; sentPaths, when set, are what the pages carry
	// instead. Nil paths: the pages carry none, under a made-up digest.
	paths, sentPaths []string

	// delay holds samples back this long before answering.
	delay map[uint64]time.Duration
	// failAt aborts the stream that sends the n-th response (counted over
	// the server's life), before sending it; each listed n fires once.
	failAt map[int64]bool
	// failAlways aborts every stream on its first request.
	failAlways bool
	// deadlines answers the first n requests for each listed sample with
	// ERROR_KIND_DEADLINE.
	deadlines map[uint64]int
	// linkBPS, when set, throttles each stream's responses to that many
	// bytes per second, by the request's epoch (a shaped link).
	linkBPS func(epoch uint64) float64
	// cpus is announced by Info. Zero means 1.
	cpus float64
	// contended, when set, answers the offloads with fallback that it
	// picks raw, as a storage agent short of CPU does.
	contended func(sample uint64) bool
	// infoErr, when set, is Info's error (nil: answer).
	infoErr func() error
	// layout and held, when set, are the shard layout and the shards Info
	// announces.
	layout []*dataplanepb.ShardRange
	held   []uint32
	// badCut, when set, damages the cuts of the samples it picks (half
	// their JPEG is cut off): a cut that does not decode.
	badCut func(sample uint64) bool
	// dieAt, when positive, kills the agent at its dieAt-th response:
	// that stream and every later one abort, and Info fails.
	dieAt int64
	dead  atomic.Bool

	responses atomic.Int64
	requests  atomic.Int64
	wg        sync.WaitGroup // reader goroutines outliving their handler

	mu          sync.Mutex
	inflight    int // requests received and not yet answered, all streams
	maxInflight int
}

var _ dataplanepb.StorageServer = (*fakeStorage)(nil)

func newFake(t testing.TB, name string) *fakeStorage {
	return &fakeStorage{name: name, p: testPipeline(t), data: testDataset(t)}
}

// fakePathsDigest stands for the digest of the fake's sample paths.
var fakePathsDigest = sha256.Sum256([]byte("fake paths"))

func (s *fakeStorage) catalogData() [][]byte {
	if s.catData != nil {
		return s.catData
	}
	return s.data
}

// catalogFingerprint is the fingerprint of the catalog the fake serves.
func (s *fakeStorage) catalogFingerprint() string {
	pd := s.pathsDigest()
	fp := dataplanepb.NewFingerprinter(pd[:])
	for i, b := range s.catalogData() {
		fp.Add(uint64(len(b)), uint32(i%3), sha256.Sum256(b))
	}
	return fp.Sum()
}

// pathsDigest is the digest of paths, or fakePathsDigest without them.
func (s *fakeStorage) pathsDigest() [32]byte {
	if s.paths == nil {
		return fakePathsDigest
	}
	h := sha256.New()
	for _, p := range s.paths {
		h.Write(append([]byte(p), 0))
	}
	return [32]byte(h.Sum(nil))
}

func (s *fakeStorage) Info(context.Context, *dataplanepb.InfoRequest) (*dataplanepb.InfoResponse, error) {
	if s.infoErr != nil {
		if err := s.infoErr(); err != nil {
			return nil, err
		}
	}
	if s.dead.Load() {
		return nil, status.Error(codes.Unavailable, "fake: dead")
	}
	return &dataplanepb.InfoResponse{Node: s.name, Version: "test", Fingerprint: cmp.Or(s.fingerprint, s.catalogFingerprint()), Cpus: max(s.cpus, 1),
		Samples: uint64(len(s.data)), Layout: s.layout, HeldShards: s.held}, nil
}

func (s *fakeStorage) Catalog(req *dataplanepb.CatalogRequest, stream dataplanepb.Storage_CatalogServer) error {
	// Pages of 10 exercise the paging.
	for first := 0; first < len(s.data) || first == 0; first += 10 {
		page := &dataplanepb.CatalogPage{First: uint64(first)}
		if first == 0 {
			page.Fingerprint, page.Total, page.ClassNames = cmp.Or(s.forgeFP, s.catalogFingerprint()), uint64(len(s.data)), []string{"a", "b", "c"}
			pd := s.pathsDigest()
			page.PathsDigest = pd[:]
		}
		sent := s.paths
		if s.sentPaths != nil {
			sent = s.sentPaths
		}
		for i := first; i < min(first+10, len(s.data)); i++ {
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
		if len(s.data) == 0 {
			break
		}
	}
	return nil
}

func (s *fakeStorage) addInflight(d int) {
	s.mu.Lock()
	s.inflight += d
	s.maxInflight = max(s.maxInflight, s.inflight)
	s.mu.Unlock()
}

// Fetch answers each request from its own goroutine. The reader runs
// apart from the handler, which can then return (ending the stream) while
// the reader is blocked in Recv; the reader is owned by s.wg.
func (s *fakeStorage) Fetch(stream dataplanepb.Storage_FetchServer) error {
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
		if s.failAlways || s.dead.Load() {
			cancel(status.Error(codes.Unavailable, "fake: always failing"))
			break
		}
		s.addInflight(1)
		workers.Go(func() {
			resp := s.serve(ctx, req)
			sendMu.Lock()
			defer sendMu.Unlock()
			s.addInflight(-1)
			if ctx.Err() != nil {
				return
			}
			if s.dieAt > 0 && s.responses.Load() >= s.dieAt-1 {
				s.dead.Store(true)
			}
			if s.dead.Load() {
				cancel(status.Error(codes.Unavailable, "fake: died"))
				return
			}
			n := s.responses.Add(1)
			s.mu.Lock()
			fail := s.failAt[n]
			delete(s.failAt, n)
			s.mu.Unlock()
			if fail {
				cancel(status.Errorf(codes.Unavailable, "fake: injected failure at response %d", n))
				return
			}
			if s.linkBPS != nil {
				d := time.Duration(float64(len(resp.GetData())) / s.linkBPS(req.GetEpoch()) * float64(time.Second))
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return
				}
			}
			if err := stream.Send(resp); err != nil {
				cancel(err)
			}
		})
	}
	workers.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

func (s *fakeStorage) serve(ctx context.Context, req *dataplanepb.FetchRequest) *dataplanepb.FetchResponse {
	resp := &dataplanepb.FetchResponse{Tag: req.GetTag(), Sample: req.GetSample()}
	fail := func(kind string, msg string) *dataplanepb.FetchResponse {
		resp.Error = &dataplanepb.SampleError{Kind: dataplanepb.ErrorKind(dataplanepb.ErrorKind_value["ERROR_KIND_"+kind]), Message: msg}
		return resp
	}
	if d := s.delay[req.GetSample()]; d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	if s.deadlines[req.GetSample()] > 0 {
		s.deadlines[req.GetSample()]--
		s.mu.Unlock()
		return fail("DEADLINE", "fake: queue deadline")
	}
	s.mu.Unlock()
	if req.GetSample() >= uint64(len(s.data)) {
		return fail("NOT_FOUND", "no such sample")
	}
	if req.GetPipelineId() != s.p.ID() {
		return fail("BAD_REQUEST", "unknown pipeline "+req.GetPipelineId())
	}
	start := time.Now()
	key := ops.Key{Seed: req.GetSeed(), Epoch: req.GetEpoch(), Sample: req.GetSample()}
	raw := ops.Encoded(s.data[req.GetSample()])
	var v ops.Value
	var err error
	switch {
	case req.GetFallback() && s.contended != nil && s.contended(req.GetSample()):
		v, resp.Served = raw, dataplanepb.Served_SERVED_RAW_CONTENDED
	case req.GetCut():
		v, err = s.p.Cut(key, raw, ops.Limits{})
		if errors.Is(err, ops.ErrCannotCut) {
			v, err, resp.Served = raw, nil, dataplanepb.Served_SERVED_RAW_UNCUTTABLE
		}
		if c, ok := v.(*ops.CutJPEG); ok && s.badCut != nil && s.badCut(req.GetSample()) {
			bad := *c
			bad.Data = bad.Data[:len(bad.Data)/2]
			v = &bad
		}
	default:
		v, err = s.p.Run(key, raw, 0, int(req.GetSplit()))
	}
	if err != nil {
		return fail(engine.LocalKind(err), err.Error())
	}
	b, err := ops.EncodeWire(v, ops.Codec(req.GetCodec()))
	if err != nil {
		return fail("INTERNAL", err.Error())
	}
	resp.Data, resp.StorageCpuNs = b, uint64(time.Since(start))
	return resp
}

// memNet serves gRPC servers over bufconn, by address.
type memNet struct {
	mu  sync.Mutex
	lis map[string]*bufconn.Listener
}

func (n *memNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.lis[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("memnet: nothing at %s", addr)
	}
	return l.DialContext(ctx)
}

// serve starts srv at addr until the test ends.
func (n *memNet) serve(t testing.TB, addr string, srv dataplanepb.StorageServer) {
	t.Helper()
	n.serveOn(t, addr, srv, bufconn.Listen(1<<20), nil)
}

// serveOn is serve on l, whose accepted connections wrap wraps (nil: as
// they are).
func (n *memNet) serveOn(t testing.TB, addr string, srv dataplanepb.StorageServer, l *bufconn.Listener, wrap func(net.Listener) net.Listener) {
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
		if f, ok := srv.(*fakeStorage); ok {
			f.wg.Wait()
		}
	})
}

// delivery is what OnSample saw.
type delivery struct {
	epoch, sample uint64
	sha           [32]byte
}

type recorder struct {
	mu  sync.Mutex
	got []delivery
}

func (r *recorder) on(epoch, sample uint64, sha [32]byte) {
	r.mu.Lock()
	r.got = append(r.got, delivery{epoch, sample, sha})
	r.mu.Unlock()
}

func (r *recorder) epoch(e uint64) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []delivery
	for _, d := range r.got {
		if d.epoch == e {
			out = append(out, d)
		}
	}
	return out
}

// noGPU is a GPU monitor for tests: no NVML probing.
type noGPU struct{}

func (noGPU) Sample(ctx context.Context) report.GPUStats {
	<-ctx.Done()
	return report.GPUStats{Status: "nvml: unavailable: test"}
}

// testSetup is a test agent's Config and Knobs.
type testSetup struct {
	Config
	Knobs
}

// new is NewWithKnobs of s.
func (s testSetup) new() (*Agent, error) { return NewWithKnobs(s.Config, s.Knobs) }

// testConfig is a small configuration over net's servers at addrs.
func testConfig(t testing.TB, n *memNet, addrs ...string) (testSetup, *recorder) {
	rec := &recorder{}
	cfg := testSetup{Config: DefaultConfig()}
	cfg.Discovery = Static(addrs...)
	cfg.Insecure = true // TLS is tested in storage_test.go
	cfg.Pipeline = testPipeline(t)
	cfg.Seed = 7
	cfg.Window = 8
	cfg.Workers = 2
	cfg.Batch = 8
	cfg.Queue = 2
	if n != nil {
		cfg.Dial = n.Dial
	}
	cfg.GPU = noGPU{}
	cfg.OnSample = rec.on
	return cfg, rec
}

// runAgent runs cfg to completion under a deadline.
func runAgent(t testing.TB, cfg testSetup) ([]report.EpochReport, error) {
	t.Helper()
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return a.Run(ctx)
}

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}
