package computeagent

import (
	"maps"
	"testing"
	"time"

	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// TestPlanFromEstimates: with no saved profile, a policy run against the
// real storage agent (whose catalog carries the JPEG headers) plans its
// first epoch from the header estimates: no No-Off profiling epoch, every
// epoch runs the policy's plan; the first epoch's measurements refine the
// profile and the second runs a plan made from them; each epoch delivers
// every sample once with the tensors of a No-Off run.
func TestPlanFromEstimates(t *testing.T) {
	n := bufNet{"st1:7070": bufconn.Listen(1 << 20)}
	startStorage(t, storageagent.Config{Data: writeImageFolder(t, -1), Name: "st1", CPUs: 1, AllowClientSpecs: true, Insecure: true}, storageagent.Knobs{}, n["st1:7070"])

	cfg, ref := testConfig(t, nil, "st1:7070")
	cfg.Dial = n.Dial
	cfg.Epochs = 3
	if _, err := runAgent(t, cfg); err != nil {
		t.Fatal(err)
	}

	cfg, rec := testConfig(t, nil, "st1:7070")
	cfg.Dial = n.Dial
	cfg.Policy = policy.NameOptimal
	cfg.Epochs = 3
	cfg.ProfileBudget = 150 * time.Millisecond
	cfg.Logger = testLogger(t)
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 3 {
		t.Fatalf("%d reports, want 3", len(reports))
	}
	for i, r := range reports {
		checkPlanned(t, r, policy.NameOptimal)
		if r.Profiled {
			t.Errorf("epoch %d profiled: a No-Off profiling epoch ran", i)
		}
		want := report.PlanMeasured
		if i == 0 {
			want = report.PlanEstimate
		}
		if r.PlanSource != want {
			t.Errorf("epoch %d: plan source %q, want %q", i, r.PlanSource, want)
		}
		if got, want := epochSHAs(t, rec, r.Epoch), epochSHAs(t, ref, r.Epoch); !maps.Equal(got, want) {
			t.Errorf("epoch %d: tensors differ from No-Off's", i)
		}
	}
	r0 := reports[0]
	if r0.Stage1 == nil || r0.Stage1.Profile != report.ProfileEstimated || !(r0.Stage1.Seconds > 0) {
		t.Errorf("first epoch's stage 1: %+v, want profile %q and its seconds", r0.Stage1, report.ProfileEstimated)
	}
	if !(r0.FirstBatchSeconds > 0) || r0.FirstBatchSeconds > r0.StartWaitSeconds+r0.Seconds {
		t.Errorf("first batch after %v s, want within the epoch's %v + %v s", r0.FirstBatchSeconds, r0.StartWaitSeconds, r0.Seconds)
	}
	if r0.Refined != testSamples || !r0.Replanned {
		t.Errorf("first epoch: refined %d (replanned %v), want all %d samples measured and a new plan", r0.Refined, r0.Replanned, testSamples)
	}
}

// epochSHAs maps each sample of epoch e, delivered once, to its tensor's
// hash.
func epochSHAs(t *testing.T, rec *recorder, e uint64) map[uint64][32]byte {
	t.Helper()
	got := rec.epoch(e)
	checkOnce(t, got, allSamples())
	m := map[uint64][32]byte{}
	for _, d := range got {
		m[d.sample] = d.sha
	}
	return m
}
