package computeagent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/compute-agent/batch"
	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// A pipeline that compresses its crop (imagenet-train-q95) fetched at the
// split after encode_jpeg: the storage agent runs decode, crop, flip and
// encode and sends the JPEG's wire form (an encoded value at split 4),
// the compute agent decodes it and finishes. Every sample arrives once,
// with the tensor of the whole pipeline run here.
func TestEncodedSplitWithStorageAgent(t *testing.T) {
	p, err := ops.Preset("imagenet-train-q95")
	if err != nil {
		t.Fatal(err)
	}
	k := -1
	for j := range p.Len() {
		if _, ok := p.Op(j).(ops.Encode); ok {
			k = j + 1
		}
	}
	if k < 0 || p.KindAt(k) != ops.KindEncoded {
		t.Fatalf("split after encode_jpeg: %d, kind %v", k, p.KindAt(max(k, 0)))
	}
	// One class, so that sample i is file i.
	dir := t.TempDir()
	class := filepath.Join(dir, "class0")
	if err := os.MkdirAll(class, 0o755); err != nil {
		t.Fatal(err)
	}
	data := enginetest.Dataset(t)
	for i, b := range data {
		if err := os.WriteFile(filepath.Join(class, fmt.Sprintf("%03d.jpg", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const seed = 7
	want := map[uint64][32]byte{}
	ids := make([]uint64, len(data))
	for i, b := range data {
		v, err := p.Run(ops.Key{Seed: seed, Epoch: 0, Sample: uint64(i)}, ops.Encoded(b), 0, p.Len())
		if err != nil {
			t.Fatal(err)
		}
		want[uint64(i)], ids[i] = batch.RowSHA(v.(*ops.Tensor)), uint64(i)
	}
	n := bufNet{"st1:7070": bufconn.Listen(1 << 20)}
	startStorage(t, storageagent.Config{Data: dir, Name: "st1:7070", CPUs: 1, AllowClientSpecs: true, Insecure: true}, storageagent.Knobs{}, n["st1:7070"])
	splits, mixedAt := map[uint64]int{}, 0
	for s := range uint64(len(data)) {
		splits[s] = int(s % uint64(p.Len()+1))
		if splits[s] == k {
			mixedAt++
		}
	}
	for _, tc := range []struct {
		plan  *policy.Plan
		codec wireform.Codec
		at    int // samples at split k
	}{
		{planner.PlanOf("encoded", p.ID(), k, nil), wireform.CodecZstd, len(data)},
		{planner.PlanOf("mixed", p.ID(), 0, splits), wireform.CodecNone, mixedAt},
	} {
		t.Run(fmt.Sprintf("%s-codec%d", tc.plan.Policy, tc.codec), func(t *testing.T) {
			cfg, rec := testConfig(t, nil, "st1:7070")
			cfg.Dial = n.Dial
			cfg.Pipeline = p
			cfg.Seed = seed
			cfg.Plan = tc.plan
			cfg.Codec = tc.codec
			// The plan's splits exactly: no offload answered raw.
			cfg.StrictOffload = true
			reports, err := runAgent(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := reports[0]
			checkReport(t, r)
			if r.SamplesFailed != 0 {
				t.Fatalf("failed %+v", r.Failed)
			}
			got := rec.epoch(0)
			checkOnce(t, got, ids)
			for _, d := range got {
				if d.sha != want[d.sample] {
					t.Errorf("sample %d: tensor differs from the pipeline run here", d.sample)
				}
			}
			at := 0
			for _, s := range r.BySplit {
				if s.Split == k {
					at = s.Samples
				}
			}
			if at != tc.at {
				t.Errorf("%d samples at split %d, want %d (by split %+v)", at, k, tc.at, r.BySplit)
			}
			t.Logf("%d samples, %d bytes, by split %+v", r.Samples, r.BytesReceived, r.BySplit)
		})
	}
}

// A policy run of imagenet-train-q95 with no saved profile plans its
// first epoch from the header estimates, which size the split after
// encode_jpeg by their fit; every epoch delivers each sample once with
// No-Off's tensors.
func TestPlanFromEstimatesEncoded(t *testing.T) {
	p, err := ops.Preset("imagenet-train-q95")
	if err != nil {
		t.Fatal(err)
	}
	cfg, rec, ref := estimateRun(t, "", policy.NameOptimal, 2, p)
	// As TestPlanFromEstimates: the first batch waits for the plan.
	cfg.ProfileBudget = 150 * time.Millisecond
	sw := &signalWriter{match: "plan switched mid-epoch", seen: make(chan struct{})}
	cfg.Logger = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), sw)).Level(zerolog.InfoLevel)
	cfg.Consumer = untilSwitched{sw.seen}
	cfg.Window, cfg.Batch, cfg.Workers = 1, 2, 1
	// Calibrating imagenet-train-q95 runs an encode and two decodes per
	// sample, slow under the race detector beside make test's other
	// streams: more time than runAgent's default.
	cfg.within = 90 * time.Second
	reports := runEpochs(t, cfg, 2)
	for i, r := range reports {
		checkPlanned(t, r, policy.NameOptimal)
		want := report.PlanMeasured
		if i == 0 {
			want = report.PlanEstimate
		}
		if r.Profiled || r.PlanSource != want {
			t.Errorf("epoch %d: profiled %v, plan source %q, want %q", i, r.Profiled, r.PlanSource, want)
		}
		t.Logf("epoch %d: plan source %q, by split %+v", i, r.PlanSource, r.BySplit)
	}
	if r0 := reports[0]; r0.Stage1 == nil || r0.Stage1.Profile != report.ProfileEstimated {
		t.Errorf("first epoch's stage 1: %+v, want profile %q", r0.Stage1, report.ProfileEstimated)
	}
	sameAsNoOff(t, rec, ref, reports)
}
