package storageagent

import (
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestWorkConservingFallback: a storage agent whose budget is slowed far
// below what it was asked to offload answers offloads with fallback raw
// (SERVED_RAW_CONTENDED), while offloads without fallback all run; either
// way every sample finishes to the bytes of a local run.
func TestWorkConservingFallback(t *testing.T) {
	cfg := testConfig(t)
	cfg.CPUs = 1
	a := startAgent(t, cfg)
	// Each offload takes 30 ms of worker time: the budget is contended.
	a.srv.beforeJob = func() { time.Sleep(30 * time.Millisecond) }
	p := preset(t, "imagenet-train")
	var reqs []*dataplanepb.FetchRequest
	for round := range 8 {
		for s := range uint64(goodSamples) {
			reqs = append(reqs, &dataplanepb.FetchRequest{
				Tag: uint64(len(reqs)), Sample: s, Epoch: uint64(round), Seed: 7, Split: 2,
				PipelineId: p.ID(), Fallback: round%2 == 0, Priority: uint32(s), CostNs: uint64(time.Millisecond),
				HorizonNs: uint64(20 * time.Millisecond),
			})
			reqs = append(reqs, &dataplanepb.FetchRequest{Tag: uint64(len(reqs)), Sample: s})
		}
	}
	got := fetchAll(t, a.client, reqs)
	var contended int
	for _, req := range reqs {
		resp := got[req.Tag]
		if resp.Error != nil {
			t.Fatalf("sample %d: %v", req.Sample, resp.Error)
		}
		if resp.Served == dataplanepb.Served_SERVED_RAW_CONTENDED {
			if !req.Fallback {
				t.Fatalf("tag %d: answered raw without fallback", req.Tag)
			}
			contended++
		}
		if req.Split == 0 {
			continue
		}
		raw, err := a.Dataset().Read(req.Sample)
		if err != nil {
			t.Fatal(err)
		}
		key := ops.Key{Seed: 7, Epoch: req.Epoch, Sample: req.Sample}
		want, err := p.Run(key, ops.Encoded(raw), 0, p.Len())
		if err != nil {
			t.Fatal(err)
		}
		mid, err := wireform.Decode(resp.Data, wireform.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		k := int(req.Split)
		if resp.Served != dataplanepb.Served_SERVED_AS_REQUESTED {
			k = 0
			if string(mid.(ops.Encoded)) != string(raw) {
				t.Fatalf("sample %d: the raw answer is not the file", req.Sample)
			}
		}
		fin, err := p.Run(key, mid, k, p.Len())
		if err != nil {
			t.Fatal(err)
		}
		if string(wireBytes(t, fin)) != string(wireBytes(t, want)) {
			t.Fatalf("sample %d epoch %d (served %v): tensor differs from a local run", req.Sample, req.Epoch, resp.Served)
		}
	}
	if contended == 0 {
		t.Fatal("no offload was answered raw although each took 30x its estimate")
	}
	t.Logf("%d of %d offloads with fallback answered raw", contended, len(reqs)/4)

	// The same agent: against a horizon of 1 ms, which the second offload
	// in the backlog already misses, offloads whose raw answer would hold
	// the link longer than they can wait (raw_extra_ns, an hour, clamped
	// to the op timeout) all run.
	var late []*dataplanepb.FetchRequest
	for s := range uint64(goodSamples) {
		late = append(late, &dataplanepb.FetchRequest{
			Tag: uint64(len(late)), Sample: s, Epoch: 9, Seed: 7, Split: 2, PipelineId: p.ID(), Fallback: true,
			Priority: uint32(s), CostNs: uint64(time.Millisecond), HorizonNs: uint64(time.Millisecond),
			RawExtraNs: uint64(time.Hour),
		})
	}
	for tag, resp := range fetchAll(t, a.client, late) {
		if resp.Error != nil {
			t.Fatalf("tag %d: %v", tag, resp.Error)
		}
		if resp.Served != dataplanepb.Served_SERVED_AS_REQUESTED {
			t.Errorf("tag %d: served %v although its raw answer would take longer than its wait", tag, resp.Served)
		}
	}
}

// TestFetchCut: the JPEG-domain crop. Each sample comes back cut (or, when
// the file cannot be cut exactly, raw with SERVED_RAW_UNCUTTABLE) and
// finishes to the bytes of a local run; a pipeline without the cut is a bad
// request.
func TestFetchCut(t *testing.T) {
	a := startAgent(t, testConfig(t))
	p := preset(t, "imagenet-train")
	var reqs []*dataplanepb.FetchRequest
	for epoch := range uint64(3) {
		for s := range uint64(goodSamples) {
			reqs = append(reqs, &dataplanepb.FetchRequest{Tag: uint64(len(reqs)), Sample: s, Epoch: epoch, Seed: 3, Cut: true, PipelineId: p.ID()})
		}
	}
	got := fetchAll(t, a.client, reqs)
	for _, req := range reqs {
		resp := got[req.Tag]
		if resp.Error != nil {
			t.Fatalf("sample %d: %v", req.Sample, resp.Error)
		}
		mid, err := wireform.Decode(resp.Data, wireform.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		k := ops.SplitCut
		switch resp.Served {
		case dataplanepb.Served_SERVED_AS_REQUESTED:
			if mid.Kind() != ops.KindCut {
				t.Fatalf("sample %d: served as a cut but holds %s", req.Sample, mid.Kind())
			}
		case dataplanepb.Served_SERVED_RAW_UNCUTTABLE:
			k = 0
		default:
			t.Fatalf("sample %d: served %v", req.Sample, resp.Served)
		}
		raw, err := a.Dataset().Read(req.Sample)
		if err != nil {
			t.Fatal(err)
		}
		key := ops.Key{Seed: 3, Epoch: req.Epoch, Sample: req.Sample}
		want, err := p.Run(key, ops.Encoded(raw), 0, p.Len())
		if err != nil {
			t.Fatal(err)
		}
		fin, err := p.Run(key, mid, k, p.Len())
		if err != nil {
			t.Fatal(err)
		}
		if string(wireBytes(t, fin)) != string(wireBytes(t, want)) {
			t.Fatalf("sample %d epoch %d: the cut's tensor differs from a local run", req.Sample, req.Epoch)
		}
	}
	val := preset(t, "imagenet-val")
	bad := fetchAll(t, a.client, []*dataplanepb.FetchRequest{{Tag: 1, Sample: 0, Cut: true, PipelineId: val.ID()}})
	if e := bad[1].Error; e == nil || e.Kind != dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST {
		t.Fatalf("cut of imagenet-val: %v, want a bad request", e)
	}
}
