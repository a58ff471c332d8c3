package storageagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/internal/grpcbuf"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

// Ids of testData's samples.
const (
	goodSamples = 6
	badSample   = 6 // garbage bytes named .jpg
	truncSample = 7 // a JPEG cut in half
	testSamples = 8
)

// testData is an ImageFolder of three classes, two good JPEGs each, and two
// damaged files at the end of the last class.
func testData(t testing.TB) string {
	t.Helper()
	dir := datasettest.ImageFolder(t, []string{"a", "b", "c"}, 2)
	datasettest.WriteFile(t, filepath.Join(dir, "c", "zz_bad.jpg"), []byte("this is not a jpeg at all"))
	j := datasettest.JPEG(t, 99)
	datasettest.WriteFile(t, filepath.Join(dir, "c", "zz_trunc.jpg"), j[:len(j)/2])
	return dir
}

func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Insecure = true // TLS is tested in agent_test.go
	cfg.Data = testData(t)
	cfg.CPUs = 2
	cfg.Name = "test-storage"
	cfg.Version = "v-test"
	cfg.Insecure = true // TLS is tested in agent_test.go
	return cfg
}

func preset(t testing.TB, name string) *ops.Pipeline {
	t.Helper()
	p, err := ops.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInfoAndHealth(t *testing.T) {
	a := startAgent(t, testConfig(t))
	ctx := context.Background()
	info, err := a.client.Info(ctx, &dataplanepb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Node != "test-storage" || info.Version != "v-test" || info.Cpus != 2 || info.Samples != testSamples || info.Fingerprint != a.Dataset().Fingerprint() {
		t.Errorf("Info = %v", info)
	}
	for _, svc := range []string{"", "sophon.dataplane.v1.Storage"} {
		h, err := healthpb.NewHealthClient(a.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatal(err)
		}
		if h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health(%q) = %v, want SERVING", svc, h.Status)
		}
	}
}

// pathCapped is TestCatalog's page size under a small path budget.
const pathCapped = 1000

func TestCatalog(t *testing.T) {
	a := startAgent(t, testConfig(t))
	ds := a.Dataset()
	for _, size := range []uint32{0, 1, 3, 8, 100, pathCapped} {
		if size == pathCapped {
			// Pages end once their paths pass 2 paths' bytes: 3 samples a
			// page (the paths are alike in length), whatever the size asked.
			defer func(v int) { maxCatalogPathBytes = v }(maxCatalogPathBytes)
			maxCatalogPathBytes = 2*len(ds.RawPath(0)) + 1
		}
		stream, err := a.client.Catalog(context.Background(), &dataplanepb.CatalogRequest{PageSize: size})
		if err != nil {
			t.Fatal(err)
		}
		var labels []uint32
		var sizes []uint64
		ph := sha256.New() // the paths digest, from the pages' paths
		pages := 0
		for {
			p, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.First != uint64(len(labels)) {
				t.Fatalf("page %d starts at %d, want %d", pages, p.First, len(labels))
			}
			first := pages == 0
			if first != (p.Fingerprint != "") || first != (p.Total != 0) || first != (len(p.ClassNames) > 0) {
				t.Errorf("page %d: fingerprint %q, total %d, classes %v: want them on the first page only", pages, p.Fingerprint, p.Total, p.ClassNames)
			}
			if first && (p.Fingerprint != ds.Fingerprint() || p.Total != testSamples || !slices.Equal(p.ClassNames, []string{"a", "b", "c"})) {
				t.Errorf("first page %v", p)
			}
			if len(p.Labels) != len(p.RawSizes) {
				t.Fatalf("page %d: %d labels, %d sizes", pages, len(p.Labels), len(p.RawSizes))
			}
			if len(p.Paths) != len(p.Labels) {
				t.Fatalf("page %d: %d paths for %d labels", pages, len(p.Paths), len(p.Labels))
			}
			if len(p.JpegHeaders) != jpeg.SummarySize*len(p.Labels) {
				t.Fatalf("page %d: %d bytes of headers for %d labels", pages, len(p.JpegHeaders), len(p.Labels))
			}
			for j := range p.Labels {
				i := p.First + uint64(j)
				h, err := jpeg.ParseSummary(p.JpegHeaders[jpeg.SummarySize*j:])
				if err != nil || h != ds.Header(i) || h.Known() != (i != badSample) {
					t.Errorf("sample %d: header %v, %v; dataset's %v, known only for the JPEGs", i, h, err, ds.Header(i))
				}
			}
			for j, path := range p.Paths {
				ph.Write(path)
				ph.Write([]byte{0})
				if i := p.First + uint64(j); string(path) != ds.RawPath(i) {
					t.Errorf("sample %d: path %q, want %q", i, path, ds.RawPath(i))
				}
			}
			labels = append(labels, p.Labels...)
			sizes = append(sizes, p.RawSizes...)
			pages++
		}
		want := 1
		switch size {
		case pathCapped:
			want = (testSamples + 2) / 3
		case 0:
		default:
			want = (testSamples + int(size) - 1) / int(size)
		}
		if pages != want {
			t.Errorf("page size %d: %d pages, want %d", size, pages, want)
		}
		if pd := ds.PathsDigest(); !bytes.Equal(ph.Sum(nil), pd[:]) {
			t.Errorf("page size %d: the paths do not give the paths digest", size)
		}
		for i := range uint64(testSamples) {
			if labels[i] != ds.Label(i) || sizes[i] != ds.RawSize(i) {
				t.Errorf("sample %d: label %d size %d, want %d %d", i, labels[i], sizes[i], ds.Label(i), ds.RawSize(i))
			}
		}
	}
}

// TestFetchEverySplit fetches good samples at every split of each preset
// and checks placement invariance: the intermediate equals running
// ops[0:split] locally, and finishing it locally equals the whole pipeline.
func TestFetchEverySplit(t *testing.T) {
	a := startAgent(t, testConfig(t))
	codecs := []dataplanepb.Codec{dataplanepb.Codec_CODEC_NONE, dataplanepb.Codec_CODEC_ZSTD, dataplanepb.Codec_CODEC_S2}
	for _, name := range []string{"imagenet-train", "imagenet-val"} {
		p := preset(t, name)
		var reqs []*dataplanepb.FetchRequest
		for _, sample := range []uint64{0, 3, 5} {
			for k := 0; k <= p.Len(); k++ {
				reqs = append(reqs, &dataplanepb.FetchRequest{
					Tag: uint64(len(reqs)), Sample: sample, Epoch: 2, Seed: 42, Split: uint32(k),
					PipelineId: p.ID(), Codec: codecs[len(reqs)%len(codecs)],
				})
			}
		}
		got := fetchAll(t, a.client, reqs)
		for _, req := range reqs {
			resp := got[req.Tag]
			if resp.Error != nil {
				t.Fatalf("%s sample %d split %d: %v", name, req.Sample, req.Split, resp.Error)
			}
			if resp.Sample != req.Sample {
				t.Fatalf("tag %d: sample %d, want %d", req.Tag, resp.Sample, req.Sample)
			}
			if req.Split > 0 && resp.StorageCpuNs == 0 {
				t.Errorf("%s sample %d split %d: no CPU time reported", name, req.Sample, req.Split)
			}
			// Budget time: at least the CPU time for offloaded samples
			// (a whole-core budget here), none for raw reads.
			if raw := req.Split == 0 && req.Codec == dataplanepb.Codec_CODEC_NONE; raw != (resp.StorageBudgetNs == 0) || resp.StorageBudgetNs > 0 && resp.StorageBudgetNs < resp.StorageCpuNs {
				t.Errorf("%s sample %d split %d: budget %d ns, cpu %d ns", name, req.Sample, req.Split, resp.StorageBudgetNs, resp.StorageCpuNs)
			}
			raw, err := a.Dataset().Read(req.Sample)
			if err != nil {
				t.Fatal(err)
			}
			key := ops.Key{Seed: 42, Epoch: 2, Sample: req.Sample}
			k := int(req.Split)
			wantMid, err := p.Run(key, ops.Encoded(raw), 0, k)
			if err != nil {
				t.Fatal(err)
			}
			mid, err := wireform.Decode(resp.Data, wireform.Limits{})
			if err != nil {
				t.Fatalf("%s sample %d split %d: Decode: %v", name, req.Sample, k, err)
			}
			if string(wireBytes(t, mid)) != string(wireBytes(t, wantMid)) {
				t.Errorf("%s sample %d split %d: intermediate differs from a local run", name, req.Sample, k)
			}
			whole, err := p.Run(key, ops.Encoded(raw), 0, p.Len())
			if err != nil {
				t.Fatal(err)
			}
			finished, err := p.Run(key, mid, k, p.Len())
			if err != nil {
				t.Fatal(err)
			}
			if string(wireBytes(t, finished)) != string(wireBytes(t, whole)) {
				t.Errorf("%s sample %d split %d: finished tensor differs from the whole pipeline", name, req.Sample, k)
			}
		}
	}
}

func TestFetchCustomSpec(t *testing.T) {
	cfg := testConfig(t)
	cfg.AllowClientSpecs = true
	a := startAgent(t, cfg)
	specText := []byte(`{"name": "tiny", "ops": [{"op": "decode"}, {"op": "resize", "size": [40]}, {"op": "center_crop", "size": [32, 32]}, {"op": "to_tensor"}]}`)
	sp, err := ops.ParseSpec(specText)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sp.Build()
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*dataplanepb.FetchRequest{
		// The spec comes with the first request only.
		{Tag: 0, Sample: 1, Split: 4, PipelineId: p.ID(), PipelineSpec: specText},
		{Tag: 1, Sample: 2, Split: 3, PipelineId: p.ID()},
		{Tag: 2, Sample: 2, Split: 2, PipelineId: "tiny@000000000000", PipelineSpec: specText},
		{Tag: 3, Sample: 2, Split: 2, PipelineId: "nobody@123456789abc"},
		{Tag: 4, Sample: 2, Split: 2, PipelineId: "x", PipelineSpec: []byte("{name: x, ops: [{op: sharpen}]}")},
	}
	got := fetchAll(t, a.client, reqs)
	for _, tag := range []uint64{0, 1} {
		resp := got[tag]
		if resp.Error != nil {
			t.Fatalf("tag %d: %v", tag, resp.Error)
		}
		raw, _ := a.Dataset().Read(resp.Sample)
		want, err := p.Run(ops.Key{Sample: resp.Sample}, ops.Encoded(raw), 0, int(reqs[tag].Split))
		if err != nil {
			t.Fatal(err)
		}
		v, err := wireform.Decode(resp.Data, wireform.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if string(wireBytes(t, v)) != string(wireBytes(t, want)) {
			t.Errorf("tag %d: result differs from a local run", tag)
		}
	}
	for _, tag := range []uint64{2, 3, 4} {
		if e := got[tag].Error; e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST {
			t.Errorf("tag %d: error %v, want BAD_REQUEST", tag, e)
		}
	}
	// Another stream finds the pipeline in the agent's cache.
	got = fetchAll(t, a.client, []*dataplanepb.FetchRequest{{Tag: 9, Sample: 0, Split: 4, PipelineId: p.ID()}})
	if e := got[9].Error; e != nil {
		t.Errorf("cached pipeline on a new stream: %v", e)
	}
}

// TestFetchErrors checks the typed per-sample errors and that the stream
// keeps serving after each.
func TestFetchErrors(t *testing.T) {
	a := startAgent(t, testConfig(t))
	id := preset(t, "imagenet-train").ID()
	cases := []struct {
		req  *dataplanepb.FetchRequest
		want []dataplanepb.ErrorKind // any of these; nil means success
	}{
		{&dataplanepb.FetchRequest{Sample: badSample, Split: 5}, []dataplanepb.ErrorKind{dataplanepb.ErrorKind_ERROR_KIND_NOT_JPEG}},
		{&dataplanepb.FetchRequest{Sample: 0, Split: 5}, nil},
		{&dataplanepb.FetchRequest{Sample: truncSample, Split: 1}, []dataplanepb.ErrorKind{dataplanepb.ErrorKind_ERROR_KIND_TRUNCATED, dataplanepb.ErrorKind_ERROR_KIND_CORRUPT}},
		{&dataplanepb.FetchRequest{Sample: badSample, Split: 0}, nil}, // raw bytes need no decoding
		{&dataplanepb.FetchRequest{Sample: testSamples + 5, Split: 0}, []dataplanepb.ErrorKind{dataplanepb.ErrorKind_ERROR_KIND_NOT_FOUND}},
		{&dataplanepb.FetchRequest{Sample: 1, Split: 6}, []dataplanepb.ErrorKind{dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST}},
		{&dataplanepb.FetchRequest{Sample: 1, Split: 2, Codec: 9}, []dataplanepb.ErrorKind{dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST}},
		{&dataplanepb.FetchRequest{Sample: 2, Split: 3}, nil},
	}
	var reqs []*dataplanepb.FetchRequest
	for i, c := range cases {
		c.req.Tag, c.req.PipelineId = uint64(i), id
		reqs = append(reqs, c.req)
	}
	// On one stream, one request at a time, so each later success follows
	// the failure before it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := a.client.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		if err := stream.Send(c.req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("case %d: stream ended: %v", i, err)
		}
		if resp.Tag != uint64(i) || resp.Sample != c.req.Sample {
			t.Fatalf("case %d: tag %d sample %d", i, resp.Tag, resp.Sample)
		}
		switch {
		case c.want == nil && resp.Error != nil:
			t.Errorf("case %d (sample %d split %d): %v, want success", i, c.req.Sample, c.req.Split, resp.Error)
		case c.want != nil && (resp.Error == nil || !slices.Contains(c.want, resp.Error.Kind)):
			t.Errorf("case %d (sample %d split %d): error %v, want one of %v", i, c.req.Sample, c.req.Split, resp.Error, c.want)
		case c.want != nil:
			if !strings.Contains(resp.Error.Message, "sample ") || len(resp.Data) != 0 {
				t.Errorf("case %d: message %q (data %d bytes): want the sample named and no data", i, resp.Error.Message, len(resp.Data))
			}
			if s := c.req.Sample; s < a.Dataset().Len() && !strings.HasPrefix(resp.Error.Message, fmt.Sprintf("sample %d (%s): ", s, a.Dataset().Path(s))) {
				t.Errorf("case %d: message %q does not name the file %s", i, resp.Error.Message, a.Dataset().Path(s))
			}
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after CloseSend: %v, want EOF", err)
	}
}

func TestQueueDeadline(t *testing.T) {
	cfg := testConfig(t)
	cfg.RequestTimeout = time.Nanosecond // every request waits longer than that
	a := startAgent(t, cfg)
	id := preset(t, "imagenet-train").ID()
	var reqs []*dataplanepb.FetchRequest
	for i := range uint64(5) {
		reqs = append(reqs, &dataplanepb.FetchRequest{Tag: i, Sample: i, Split: 5, PipelineId: id})
	}
	for tag, resp := range fetchAll(t, a.client, reqs) {
		if resp.Error == nil || resp.Error.Kind != dataplanepb.ErrorKind_ERROR_KIND_DEADLINE {
			t.Errorf("tag %d: %v, want DEADLINE", tag, resp.Error)
		}
	}
}

// TestBackPressureAndCancel stops reading a stream while sending many
// requests: the client's sends must block (the agent stops receiving), and
// cancelling the stream must leave no goroutine behind.
func TestBackPressureAndCancel(t *testing.T) {
	baseline := runtime.NumGoroutine()
	cfg := testConfig(t)
	cfg.CPUs = 1
	cfg.Queue = 2
	a := startAgent(t, cfg)
	id := preset(t, "imagenet-train").ID()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := a.client.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A few results are read, then nothing.
	const total = 100000
	var sent int
	var wg sync.WaitGroup
	wg.Go(func() {
		for sent = 0; sent < total; sent++ {
			// Split 3: a 150 KB image, so a few fill the transport's window.
			if stream.Send(&dataplanepb.FetchRequest{Tag: uint64(sent), Sample: uint64(sent % goodSamples), Split: 3, PipelineId: id}) != nil {
				return
			}
		}
	})
	for range 3 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Error != nil {
			t.Fatal(resp.Error)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if depth := a.srv.queue.Len(); depth > cfg.Queue {
		t.Errorf("queue depth %d above its bound %d", depth, cfg.Queue)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		t.Errorf("the client sent all %d requests without reading: no back-pressure", total)
	case <-time.After(500 * time.Millisecond):
	}
	cancel()
	<-done
	for {
		if _, err := stream.Recv(); err != nil {
			if status.Code(err) != codes.Canceled {
				t.Errorf("after cancel: %v, want Canceled", err)
			}
			break
		}
	}
	// The agent keeps serving other streams.
	got := fetchAll(t, a.client, []*dataplanepb.FetchRequest{{Tag: 1, Sample: 1, Split: 5, PipelineId: id}})
	if got[1].Error != nil {
		t.Fatalf("after a cancelled stream: %v", got[1].Error)
	}
	// Shut the agent down and check that nothing is left running.
	a.conn.Close()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	settleGoroutines(t, baseline+1)
}

// TestFractionalCPUBudget runs a quarter-core agent flat out for about a
// second and checks that the CPU its worker reports stays well under half a
// core (loose: the point is that the throttle engages at all).
func TestFractionalCPUBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	cfg := testConfig(t)
	cfg.CPUs = 0.25
	a := startAgent(t, cfg)
	busy, wall := measureBusy(t, a, 1200*time.Millisecond)
	frac := busy.Seconds() / wall.Seconds()
	t.Logf("cpus 0.25: busy %v over %v = %.3f cores", busy, wall, frac)
	if frac >= 0.5 {
		t.Errorf("busy fraction %.3f with cpus 0.25, want < 0.5", frac)
	}
}

// measureBusy keeps a window of whole-pipeline requests in flight on one
// stream for about d and returns the storage CPU the responses report and
// the time taken.
func measureBusy(t testing.TB, a *testAgent, d time.Duration) (busy, wall time.Duration) {
	id := preset(t, "imagenet-train").ID()
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	stream, err := a.client.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	window := make(chan struct{}, 8)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer stream.CloseSend()
		for n := uint64(0); time.Since(start) < d; n++ {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if stream.Send(&dataplanepb.FetchRequest{Tag: n, Sample: n % goodSamples, Split: 5, PipelineId: id}) != nil {
				return
			}
		}
	})
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		<-window
		if resp.Error != nil {
			t.Fatal(resp.Error)
		}
		busy += time.Duration(resp.StorageCpuNs)
	}
	wall = time.Since(start)
	wg.Wait()
	return busy, wall
}

// BenchmarkFractionalCPU reports the cores used by a quarter-core and a
// one-and-a-half-core agent running flat out.
func BenchmarkFractionalCPU(b *testing.B) {
	for _, cpus := range []float64{0.25, 0.5, 1.5} {
		b.Run(fmt.Sprintf("cpus=%g", cpus), func(b *testing.B) {
			cfg := testConfig(b)
			cfg.CPUs = cpus
			a := startAgent(b, cfg)
			var busy, wall time.Duration
			for b.Loop() {
				bu, w := measureBusy(b, a, time.Second)
				busy += bu
				wall += w
			}
			b.ReportMetric(busy.Seconds()/wall.Seconds(), "cores")
			b.ReportMetric(cpus, "budget")
		})
	}
}

// BenchmarkFetch measures one stream's throughput over bufconn with a
// window of 32 requests in flight: raw samples (split 0) and whole
// pipelines (split 5).
func BenchmarkFetch(b *testing.B) {
	dir := b.TempDir()
	for i := range 8 {
		img, err := synth.JPEG(uint64(i), 500, 375, synth.Options{})
		if err != nil {
			b.Fatal(err)
		}
		datasettest.WriteFile(b, filepath.Join(dir, "c", fmt.Sprintf("%02d.jpg", i)), img)
	}
	cfg := DefaultConfig()
	cfg.Insecure = true // TLS is tested in agent_test.go
	cfg.Data = dir
	a := startAgent(b, cfg)
	id := preset(b, "imagenet-train").ID()
	for _, split := range []uint32{0, 5} {
		b.Run(fmt.Sprintf("split=%d", split), func(b *testing.B) { fetchBench(b, a.client, id, split, 8) })
	}
}

// fetchBench fetches b.N samples (of n, in turn) at split on one stream
// with 32 requests in flight, and reports bytes and samples per second
// and the process's CPU (both ends) per sample.
func fetchBench(b *testing.B, c dataplanepb.StorageClient, id string, split uint32, n uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := c.Fetch(ctx)
	if err != nil {
		b.Fatal(err)
	}
	window := make(chan struct{}, 32)
	var wg sync.WaitGroup
	cpu0 := cpuclock.Process()
	b.ResetTimer()
	wg.Go(func() {
		defer stream.CloseSend()
		for i := range uint64(b.N) {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if stream.Send(&dataplanepb.FetchRequest{Tag: i, Sample: i % n, Split: split, PipelineId: id}) != nil {
				return
			}
		}
	})
	var bytes int64
	start := time.Now()
	for range b.N {
		resp, err := stream.Recv()
		if err != nil {
			b.Fatal(err)
		}
		<-window
		if resp.Error != nil {
			b.Fatal(resp.Error)
		}
		bytes += int64(len(resp.Data))
	}
	el := time.Since(start)
	wg.Wait()
	b.SetBytes(bytes / int64(b.N))
	b.ReportMetric(float64(b.N)/el.Seconds(), "samples/s")
	b.ReportMetric(float64(cpuclock.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkFetchPool compares the agents' gRPC buffer pool (grpcbuf.Pool,
// a tier at every power of two) with gRPC's default tiers (256 B to 32 KiB,
// then 1 MiB, each buffer cleared whole before use), both ends of one
// stream in this process: raw photographs of about 170 KB (split 0) and
// their 224x224 crops (split 2, 150 KB). cpu-ns/op is the process's CPU
// per sample. The proto codec's pool is process-wide
// (experimental.SetDefaultBufferPool, meant for init): it is swapped here
// between runs, with no stream open.
func BenchmarkFetchPool(b *testing.B) {
	dir := b.TempDir()
	const files = 8
	for i := range files {
		img, err := synth.JPEG(uint64(i), 1024, 768, synth.Options{})
		if err != nil {
			b.Fatal(err)
		}
		datasettest.WriteFile(b, filepath.Join(dir, "c", fmt.Sprintf("%02d.jpg", i)), img)
	}
	grpcDefault, err := mem.NewBinaryTieredBufferPool(8, 12, 14, 15, 20) // gRPC's mem.DefaultBufferPool
	if err != nil {
		b.Fatal(err)
	}
	defer experimental.SetDefaultBufferPool(grpcbuf.Pool)
	id := preset(b, "imagenet-train").ID()
	for _, pool := range []struct {
		name string
		p    mem.BufferPool
	}{{"grpc-default", grpcDefault}, {"grpcbuf", grpcbuf.Pool}} {
		experimental.SetDefaultBufferPool(pool.p)
		cfg := DefaultConfig()
		cfg.Insecure = true
		cfg.Data = dir
		a := startAgentWithKnobs(b, cfg, Knobs{BufferPool: pool.p})
		for _, split := range []uint32{0, 2} {
			b.Run(fmt.Sprintf("pool=%s/split=%d", pool.name, split), func(b *testing.B) { fetchBench(b, a.client, id, split, files) })
		}
	}
}

// TestRawFetchNeedsNoPipeline: split 0 is served whatever the pipeline,
// and error messages name the sample once.
func TestRawFetchNeedsNoPipeline(t *testing.T) {
	a := startAgent(t, testConfig(t))
	got := fetchAll(t, a.client, []*dataplanepb.FetchRequest{
		{Tag: 0, Sample: 3},
		{Tag: 1, Sample: 4, PipelineId: "someone-elses@0123456789ab", Codec: dataplanepb.Codec_CODEC_ZSTD},
		{Tag: 2, Sample: 100},
	})
	for _, tag := range []uint64{0, 1} {
		resp := got[tag]
		if resp.Error != nil {
			t.Fatalf("tag %d: %v", tag, resp.Error)
		}
		v, err := wireform.Decode(resp.Data, wireform.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := a.Dataset().Read(resp.Sample)
		if enc, ok := v.(ops.Encoded); !ok || string(enc) != string(raw) {
			t.Errorf("tag %d: raw fetch does not return the file's bytes", tag)
		}
	}
	e := got[2].Error
	if e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_NOT_FOUND || !strings.HasPrefix(e.Message, "sample 100: ") || strings.Count(e.Message, "100") != 1 {
		t.Errorf("unknown sample: %v", e)
	}
}

// TestRawFetchesBypassBudget checks that raw fetches do not queue behind
// offloaded work held back by a small CPU budget.
func TestRawFetchesBypassBudget(t *testing.T) {
	dir := t.TempDir()
	for i := range 4 {
		img, err := synth.JPEG(uint64(i), 320, 240, synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		datasettest.WriteFile(t, filepath.Join(dir, "c", fmt.Sprintf("%02d.jpg", i)), img)
	}
	cfg := DefaultConfig()
	cfg.Insecure = true // TLS is tested in agent_test.go
	cfg.Data = dir
	cfg.CPUs = 0.05 // one worker that idles 19x each job's CPU time
	a := startAgent(t, cfg)
	id := preset(t, "imagenet-train").ID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := a.client.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const offloaded, raw = 3, 20
	for i := range offloaded {
		if err := stream.Send(&dataplanepb.FetchRequest{Tag: uint64(i), Sample: uint64(i), Split: 5, PipelineId: id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range raw {
		if err := stream.Send(&dataplanepb.FetchRequest{Tag: uint64(100 + i), Sample: uint64(i % 4)}); err != nil {
			t.Fatal(err)
		}
	}
	rawSeen, offSeen := 0, 0
	for rawSeen+offSeen < offloaded+raw {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetError() != nil {
			t.Fatalf("tag %d: %v", resp.GetTag(), resp.GetError())
		}
		if resp.GetTag() >= 100 {
			rawSeen++
			continue
		}
		offSeen++
		if offSeen == offloaded && rawSeen < raw {
			t.Errorf("the last offloaded response came before %d of %d raw ones: raw fetches waited behind the CPU budget", raw-rawSeen, raw)
		}
	}
	stream.CloseSend()
}
