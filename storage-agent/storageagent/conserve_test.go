package storageagent

import (
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestConserverAdmits: without a horizon every offload is admitted; with
// one, an offload whose CPU backlog would finish past it is answered raw,
// and near that boundary the less efficient requests are answered raw
// first.
func TestConserverAdmits(t *testing.T) {
	ms := uint64(time.Millisecond)
	c := newConserver(1, time.Second)
	for i := range 5 {
		if ok, _ := c.admit(100, 10*ms, 0); !ok {
			t.Fatalf("offload %d refused without a horizon", i)
		}
	}
	// Backlog 50 ms + 10 ms against a 200 ms horizon: admitted (the
	// priority ranks at the median of what was seen, 0.75 x 200 ms).
	if ok, _ := c.admit(100, 10*ms, 200*ms); !ok {
		t.Fatal("offload refused with its finish well inside the horizon")
	}
	// Backlog 60 ms + 60 ms against 100 ms: answered raw.
	if ok, _ := c.admit(100, 60*ms, 100*ms); ok {
		t.Fatal("offload admitted with its finish past the horizon")
	}
	// Six admitted offloads of 10 ms are in the backlog; the refused one
	// is not.
	if c.backlog != float64(60*ms) {
		t.Fatalf("backlog %v, want 60 ms", time.Duration(c.backlog))
	}
	// The same finish against the same horizon: the most efficient
	// request gets in, the least efficient does not.
	r := newConserver(1, time.Second)
	for p := range uint32(100) {
		r.rankLocked(p * 10)
	}
	r.backlog = float64(70 * ms)
	if ok, _ := r.admit(5000, 10*ms, 100*ms); !ok {
		t.Fatal("the most efficient offload was refused 80 ms into a 100 ms horizon")
	}
	r.backlog = float64(70 * ms)
	if ok, _ := r.admit(0, 10*ms, 100*ms); ok {
		t.Fatal("the least efficient offload was admitted 80 ms into a 100 ms horizon (it has half)")
	}
	// A slower budget (a hog in the cgroup) shows in the slowdown, and
	// a finished or released job leaves the backlog.
	c2 := newConserver(1, time.Second)
	_, est := c2.admit(0, 10*ms, 0)
	for range 64 {
		c2.finished(est, 10*time.Millisecond, 30*time.Millisecond)
	}
	if c2.slowdown < 2.5 {
		t.Fatalf("slowdown %.2f after jobs that held the budget 3x their estimate", c2.slowdown)
	}
	if c2.backlog != 0 {
		t.Fatalf("backlog %v after every admitted job finished", c2.backlog)
	}
	_, est = c2.admit(0, 10*ms, 0)
	c2.released(est)
	if c2.backlog != 0 {
		t.Fatalf("backlog %v after the admitted job was released", c2.backlog)
	}
}

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
