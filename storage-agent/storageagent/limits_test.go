package storageagent

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

const tinySpec = `{"name": "tiny", "ops": [{"op": "decode"}, {"op": "resize", "size": [40]}, {"op": "center_crop", "size": [32, 32]}, {"op": "to_tensor"}]}`

func tinyPipeline(t *testing.T) *ops.Pipeline {
	t.Helper()
	sp, err := ops.ParseSpec([]byte(tinySpec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := sp.Build()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPipelineWhitelist: by default only the presets run and a client's
// spec is refused; a spec the operator registers runs without the client
// sending it.
func TestPipelineWhitelist(t *testing.T) {
	p := tinyPipeline(t)
	req := func(tag uint64, spec []byte) *dataplanepb.FetchRequest {
		return &dataplanepb.FetchRequest{Tag: tag, Sample: 1, Split: 3, PipelineId: p.ID(), PipelineSpec: spec}
	}
	a := startAgent(t, testConfig(t))
	got := fetchAll(t, a.client, []*dataplanepb.FetchRequest{req(0, []byte(tinySpec)), req(1, nil),
		{Tag: 2, Sample: 1, Split: 3, PipelineId: preset(t, "imagenet-train").ID()}})
	for _, tag := range []uint64{0, 1} {
		e := got[tag].Error
		if e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST || !strings.Contains(e.Message, "not registered") {
			t.Errorf("client spec, tag %d: %v, want BAD_REQUEST naming the registration", tag, e)
		}
	}
	if e := got[2].Error; e != nil {
		t.Errorf("preset: %v", e)
	}

	cfg := testConfig(t)
	file := filepath.Join(t.TempDir(), "tiny.json")
	datasettest.WriteFile(t, file, []byte(tinySpec))
	cfg.Pipelines = []string{file}
	b := startAgent(t, cfg)
	got = fetchAll(t, b.client, []*dataplanepb.FetchRequest{req(0, nil),
		{Tag: 1, Sample: 1, Split: 3, PipelineId: preset(t, "imagenet-train").ID()}})
	if e := got[0].Error; e != nil {
		t.Errorf("registered spec: %v", e)
	}
	if e := got[1].Error; e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST {
		t.Errorf("a preset the operator left out: %v, want BAD_REQUEST", e)
	}

	cfg.Pipelines = []string{filepath.Join(t.TempDir(), "missing.yaml")}
	if _, err := New(cfg); err == nil {
		t.Error("New with a missing pipeline file succeeded")
	}
}

// TestStreamLimitPerPeer: a peer past its stream limit is refused with
// RESOURCE_EXHAUSTED, and gets a stream again once one closes.
func TestStreamLimitPerPeer(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxStreamsPerPeer = 2
	a := startAgent(t, cfg)
	id := preset(t, "imagenet-train").ID()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func() (dataplanepb.Storage_FetchClient, context.CancelFunc, error) {
		sctx, scancel := context.WithCancel(ctx)
		s, err := a.client.Fetch(sctx)
		if err != nil {
			scancel()
			return nil, nil, err
		}
		// A refused stream may end before the request is sent: Send then
		// says io.EOF and Recv gives the status.
		_ = s.Send(&dataplanepb.FetchRequest{Sample: 0, Split: 5, PipelineId: id})
		_, err = s.Recv()
		if err != nil {
			scancel()
			return nil, nil, err
		}
		return s, scancel, err
	}
	var cancels []context.CancelFunc
	for range 2 {
		_, c, err := open()
		if err != nil {
			t.Fatal(err)
		}
		cancels = append(cancels, c)
	}
	if _, _, err := open(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "limit per peer is 2") {
		t.Fatalf("third stream: %v, want RESOURCE_EXHAUSTED naming the limit", err)
	}
	cancels[0]()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, c, err := open()
		if err == nil {
			c()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing a stream: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancels[1]()
}

// TestStalledStreamDoesNotStarveOthers: a client that queues requests and
// never reads holds only its own window; another client on the same agent
// is served, and no worker is held.
func TestStalledStreamDoesNotStarveOthers(t *testing.T) {
	cfg := testConfig(t)
	cfg.CPUs = 1
	cfg.Queue = 8
	a := startAgent(t, cfg)
	id := preset(t, "imagenet-train").ID()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stalled []dataplanepb.Storage_FetchClient
	for range 4 {
		s, err := a.client.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, s)
		go func() {
			// Split 1: a decoded image, large enough to fill the
			// transport's windows after a few.
			for i := uint64(0); ; i++ {
				if s.Send(&dataplanepb.FetchRequest{Tag: i, Sample: i % goodSamples, Split: 1, PipelineId: id}) != nil {
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // let them fill their windows
	var reqs []*dataplanepb.FetchRequest
	for i := range uint64(60) {
		reqs = append(reqs, &dataplanepb.FetchRequest{Tag: i, Sample: i % goodSamples, Split: 5, PipelineId: id})
	}
	done := make(chan map[uint64]*dataplanepb.FetchResponse, 1)
	go func() { done <- fetchAll(t, a.client, reqs) }()
	select {
	case got := <-done:
		for tag, r := range got {
			if r.Error != nil {
				t.Errorf("tag %d: %v", tag, r.Error)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a well-behaved stream got no answers while others stalled")
	}
	if n := a.srv.buffered.Load(); n > globalBufferBytes+int64(cfg.Queue)*MaxMessageBytes {
		t.Errorf("buffered %d bytes", n)
	}
	cancel()
}

// TestHealthNotServingWhenWorkersStuck: health goes NOT_SERVING while
// every worker is stuck on a job and SERVING once they move.
func TestHealthNotServingWhenWorkersStuck(t *testing.T) {
	cfg := testConfig(t)
	cfg.CPUs = 1
	cfg.StallTimeout = 200 * time.Millisecond
	release := make(chan struct{})
	var once sync.Once
	a := startAgent(t, cfg)
	a.srv.beforeJob = func() { <-release }
	defer once.Do(func() { close(release) })
	hc := healthpb.NewHealthClient(a.conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: dataplanepb.Storage_ServiceDesc.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for check() != want {
			if time.Now().After(deadline) {
				t.Fatalf("health stayed %v, want %v", check(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	id := preset(t, "imagenet-train").ID()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fetchAll(t, a.client, []*dataplanepb.FetchRequest{{Sample: 0, Split: 5, PipelineId: id}})
	}()
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	once.Do(func() { close(release) })
	<-done
	waitFor(healthpb.HealthCheckResponse_SERVING)
}

// TestRegisteredPrefixRuns: a client spec whose ops are the first ops of a
// registered pipeline (trainer mode cuts imagenet-train before to_tensor)
// runs without --allow-client-specs; one that changes an op does not.
func TestRegisteredPrefixRuns(t *testing.T) {
	a := startAgent(t, testConfig(t))
	spec := preset(t, "imagenet-train").Spec()
	spec.Name = "imagenet-train-uint8"
	spec.Ops = spec.Ops[:3]
	cut, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	spec.Ops[1].Size = []int{4096, 4096}
	big, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	js := func(p *ops.Pipeline) []byte {
		b, err := json.Marshal(p.Spec())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	got := fetchAll(t, a.client, []*dataplanepb.FetchRequest{
		{Tag: 0, Sample: 1, Split: 3, PipelineId: cut.ID(), PipelineSpec: js(cut)},
		{Tag: 1, Sample: 1, Split: 2, PipelineId: big.ID(), PipelineSpec: js(big)},
	})
	if e := got[0].Error; e != nil {
		t.Errorf("first ops of a preset: %v", e)
	}
	if e := got[1].Error; e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST {
		t.Errorf("a changed op: %v, want BAD_REQUEST", e)
	}
}

// TestServerOwnsLimits: even with client specs allowed, a spec asking for
// a 32768x32768 resize or raising the decoder's pixel cap is refused as
// TOO_LARGE, quickly and without the agent allocating the output.
func TestServerOwnsLimits(t *testing.T) {
	cfg := testConfig(t)
	cfg.AllowClientSpecs = true
	cfg.Limits.MaxPixels = 1000 // below the test images' size
	a := startAgent(t, cfg)
	build := func(spec string) (*ops.Pipeline, []byte) {
		sp, err := ops.ParseSpec([]byte(spec))
		if err != nil {
			t.Fatal(err)
		}
		p, err := sp.Build()
		if err != nil {
			t.Fatal(err)
		}
		return p, []byte(spec)
	}
	huge, hugeSpec := build(`{"name": "huge", "ops": [{"op": "decode"}, {"op": "resize", "size": [32768, 32768]}, {"op": "to_tensor"}]}`)
	raise, raiseSpec := build(`{"name": "raise", "ops": [{"op": "decode", "max_pixels": 2000000000}]}`)
	start := time.Now()
	got := fetchAll(t, a.client, []*dataplanepb.FetchRequest{
		{Tag: 0, Sample: 1, Split: 3, PipelineId: huge.ID(), PipelineSpec: hugeSpec},
		{Tag: 1, Sample: 1, Split: 1, PipelineId: raise.ID(), PipelineSpec: raiseSpec},
	})
	for tag, r := range got {
		if e := r.Error; e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_TOO_LARGE || !strings.Contains(e.Message, "sample 1") {
			t.Errorf("tag %d: %v, want TOO_LARGE naming sample 1", tag, e)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusing took %v", d)
	}
}

// TestClientSpecBoundedByMessage: a client spec whose resize output fits
// the op limit (128 MiB) but not a message (64 MiB) is refused from the
// JPEG header and the spec, before any op runs: the error is the op
// library's prediction naming the sample and the op, and the fetch
// allocates a fraction of the 75 MB output. The same spec's decode alone
// is served.
func TestClientSpecBoundedByMessage(t *testing.T) {
	cfg := testConfig(t)
	cfg.AllowClientSpecs = true
	a := startAgent(t, cfg)
	spec := []byte(`{"name": "wide", "ops": [{"op": "decode"}, {"op": "resize", "size": [5000, 5000]}, {"op": "to_tensor"}]}`)
	sp, err := ops.ParseSpec(spec)
	datasettest.Must(t, err)
	p, err := sp.Build()
	datasettest.Must(t, err)
	if a.srv.limits.MaxOutputBytes < 5000*5000*3 {
		t.Fatalf("the op limit %d refuses the resize already", a.srv.limits.MaxOutputBytes)
	}
	req := func(tag uint64, split uint32) []*dataplanepb.FetchRequest {
		return []*dataplanepb.FetchRequest{{Tag: tag, Sample: 1, Split: split, PipelineId: p.ID(), PipelineSpec: spec}}
	}
	if e := fetchAll(t, a.client, req(0, 1))[0].Error; e != nil {
		t.Fatalf("decode alone: %v", e)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := fetchAll(t, a.client, req(1, 2))[1]
	runtime.ReadMemStats(&after)
	e := r.GetError()
	if e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_TOO_LARGE ||
		!strings.Contains(e.Message, "sample 1") || !strings.Contains(e.Message, "op resize") || !strings.Contains(e.Message, "resize output 5000x5000") {
		t.Fatalf("resize to 5000x5000: %v, want TOO_LARGE naming sample 1 and op resize, predicted", e)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
		t.Errorf("refusing allocated %d MiB, want under 16 (the output is 71 MiB)", n>>20)
	}
}

// exifPadded is j with APP1 segments (EXIF's marker) inserted after its
// SOI until the file is at least n bytes: a valid JPEG that decodes to the
// same small image, as a camera file with a huge EXIF block does.
func exifPadded(j []byte, n int) []byte {
	out := append([]byte{}, j[:2]...)
	seg := make([]byte, 4+65533)
	seg[0], seg[1], seg[2], seg[3] = 0xFF, 0xE1, 0xFF, 0xFF // length 65535 counts itself
	for len(out)+len(j)-2 < n {
		out = append(out, seg...)
	}
	return append(out, j[2:]...)
}

// TestTooLargeRawRefusedAtEverySplit: a 70 MiB JPEG whose raw form does not
// fit a message (its EXIF block makes it large; the image is small) is
// refused as TOO_LARGE naming the sample and its file at every split, cut
// and codec, so that whether the model sees it does not depend on the
// plan: splits 1-2 would otherwise shrink it to a small intermediate
// while the raw fetch, the cut's raw refetch and the compute agent's local
// path could not carry it. A small sample is still served at every split.
func TestTooLargeRawRefusedAtEverySplit(t *testing.T) {
	cfg := testConfig(t)
	big := exifPadded(datasettest.JPEG(t, 3), 70<<20)
	datasettest.WriteFile(t, filepath.Join(cfg.Data, "c", "zzz_exif.jpg"), big)
	a := startAgent(t, cfg)
	const bigSample = testSamples // sorts last in class c
	if got := a.srv.ds.Path(bigSample); !strings.Contains(got, "zzz_exif.jpg") {
		t.Fatalf("sample %d is %s, want zzz_exif.jpg", bigSample, got)
	}
	p := preset(t, "imagenet-train") // it starts with decode, random_resized_crop: it cuts
	type form struct {
		split uint32
		cut   bool
		codec dataplanepb.Codec
	}
	forms := []form{{0, false, dataplanepb.Codec_CODEC_NONE}, {0, false, dataplanepb.Codec_CODEC_S2},
		{0, true, dataplanepb.Codec_CODEC_NONE}}
	for k := uint32(1); k <= uint32(p.Len()); k++ {
		forms = append(forms, form{k, false, dataplanepb.Codec_CODEC_NONE})
	}
	var reqs []*dataplanepb.FetchRequest
	for _, f := range forms {
		for _, s := range []uint64{0, bigSample} {
			reqs = append(reqs, &dataplanepb.FetchRequest{Tag: uint64(len(reqs)), Sample: s, Split: f.split,
				Cut: f.cut, Codec: f.codec, PipelineId: p.ID(), Seed: 1})
		}
	}
	got := fetchAll(t, a.client, reqs)
	for _, r := range reqs {
		f := forms[r.Tag/2]
		e := got[r.Tag].GetError()
		if r.Sample == 0 {
			if e != nil {
				t.Errorf("small sample at %+v: %v, want served", f, e)
			}
			continue
		}
		if e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_TOO_LARGE ||
			!strings.Contains(e.Message, fmt.Sprintf("sample %d", bigSample)) || !strings.Contains(e.Message, "zzz_exif.jpg") {
			t.Errorf("70 MiB file at %+v: %v, want TOO_LARGE naming sample %d and its file", f, e, bigSample)
		}
	}
}
