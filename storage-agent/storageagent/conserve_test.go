package storageagent

import (
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestConserverAdmits: with the egress unknown every offload is admitted;
// once results leave at a known rate, an offload whose CPU backlog would
// outlast the link's is answered raw, and the threshold then keeps the
// lower-priority ones out while higher ones still get in.
func TestConserverAdmits(t *testing.T) {
	c := newConserver(1, time.Second)
	t0 := time.Unix(1000, 0)
	for i := range 5 {
		if ok, _ := c.admit(t0, 100, uint64(10*time.Millisecond), 100_000, 0); !ok {
			t.Fatalf("offload %d refused before any egress was measured", i)
		}
	}
	// 1 MB/s leaves the agent: 100 KB of raw bytes cross in 100 ms.
	for i := range 11 {
		c.sent(t0.Add(time.Duration(i)*100*time.Millisecond), 100_000)
	}
	now := t0.Add(time.Second)
	// Backlog 50 ms + 10 ms against 100 ms of link: admitted.
	if ok, _ := c.admit(now, 100, uint64(10*time.Millisecond), 100_000, 0); !ok {
		t.Fatal("offload refused with the CPU backlog shorter than the link's")
	}
	// Backlog 60 ms + 60 ms against 100 ms: answered raw, and the
	// threshold moves a quarter of the way to its priority.
	if ok, _ := c.admit(now, 100, uint64(60*time.Millisecond), 100_000, 0); ok {
		t.Fatal("offload admitted with the CPU backlog longer than the link's")
	}
	if c.theta != 25 {
		t.Fatalf("threshold %v after a refusal at priority 100, want 25", c.theta)
	}
	// Below the threshold: raw without looking at the backlog.
	if ok, _ := c.admit(now, 10, 1, 100_000, 10_000_000); ok {
		t.Fatal("offload below the threshold admitted")
	}
	// A slower budget (a hog in the cgroup) shows in the slowdown.
	c2 := newConserver(1, time.Second)
	_, est := c2.admit(now, 0, uint64(10*time.Millisecond), 1, 0)
	for range 64 {
		c2.finished(est, 10*time.Millisecond, 30*time.Millisecond)
	}
	if c2.slowdown < 2.5 {
		t.Fatalf("slowdown %.2f after jobs that held the budget 3x their estimate", c2.slowdown)
	}
	if c2.backlog != 0 {
		t.Fatalf("backlog %v after every admitted job finished", c2.backlog)
	}
	admitted, demoted := c.counts()
	if admitted != 6 || demoted != 2 {
		t.Fatalf("counts %d admitted, %d demoted; want 6 and 2", admitted, demoted)
	}
}

// TestWorkConservingFallback: a storage agent whose budget is slowed far
// below what it was asked to offload answers offloads with fallback raw
// (SERVED_RAW_CONTENDED), while offloads without fallback all run; either
// way every sample finishes to the bytes of a local run.
func TestWorkConservingFallback(t *testing.T) {
	cfg := testConfig(t)
	cfg.CPUs = 1
	cfg.Queue = 4 // requests arrive as responses leave, once the egress is known
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
			})
			// Raw fetches keep the link busy, so that the egress is known.
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
		mid, err := ops.DecodeWire(resp.Data, ops.WireLimits{})
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
		mid, err := ops.DecodeWire(resp.Data, ops.WireLimits{})
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
