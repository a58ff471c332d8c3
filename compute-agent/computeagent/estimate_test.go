package computeagent

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/test/bufconn"

	"github.com/rs/zerolog"
	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// TestPlanFromEstimates: with no saved profile, a policy run against the
// real storage agent (whose catalog carries the JPEG headers) plans its
// first epoch from the header estimates: no No-Off profiling epoch, every
// epoch runs the policy's plan; the first epoch starts under No-Off before
// the plan exists (stage 1 beside it) and switches to the plan mid-epoch;
// its measurements refine the profile and the second runs a plan made from
// them; each epoch delivers every sample once with the tensors of a No-Off
// run.
func TestPlanFromEstimates(t *testing.T) {
	cfg, rec, ref := estimateRun(t, "", policy.NameOptimal, 3)
	cfg.ProfileBudget = 150 * time.Millisecond
	// The first epoch's consumer holds its first batch until the plan
	// takes over (the log says so), so stage 1 (150 ms of probes, then
	// calibration and the plan) ends within the epoch whatever the
	// machine's speed; a small window, batch and pool keep the positions
	// that go out meanwhile few (as TestPlanFromEstimatesFillsCache).
	sw := &signalWriter{match: "plan switched mid-epoch", seen: make(chan struct{})}
	cfg.Logger = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), sw)).Level(zerolog.InfoLevel)
	cfg.Consumer = untilSwitched{sw.seen}
	cfg.Window, cfg.Batch, cfg.Workers = 1, 2, 1
	reports := runEpochs(t, cfg, 3)
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
	if r0.Stage1 == nil || r0.Stage1.Profile != report.ProfileEstimated || !(r0.Stage1.Seconds > 0) || !r0.Stage1.Overlapped {
		t.Fatalf("first epoch's stage 1: %+v, want profile %q, its seconds, overlapped", r0.Stage1, report.ProfileEstimated)
	}
	if r0.PlanSwitchedAt <= 0 || r0.PlanSwitchedAt >= r0.Shard {
		t.Errorf("first epoch: plan switched after %d of %d positions, want mid-epoch", r0.PlanSwitchedAt, r0.Shard)
	}
	raw := 0
	for _, b := range r0.BySplit {
		if b.Split == 0 {
			raw = b.Samples
		}
	}
	if raw < planner.BesideCalibration {
		t.Errorf("first epoch: %d samples raw, want at least the %d calibration samples of the provisional plan", raw, planner.BesideCalibration)
	}
	if r0.Seconds < r0.Stage1.Seconds {
		t.Errorf("first epoch %v s, within it stage 1's %v s", r0.Seconds, r0.Stage1.Seconds)
	}
	for i, r := range reports[1:] {
		if r.Stage1 != nil || r.PlanSwitchedAt != 0 {
			t.Errorf("epoch %d: stage 1 %+v, switched at %d: want one plan throughout", i+1, r.Stage1, r.PlanSwitchedAt)
		}
	}
	if !(r0.FirstBatchSeconds > 0) || r0.FirstBatchSeconds > r0.StartWaitSeconds+r0.Seconds {
		t.Errorf("first batch after %v s, want within the epoch's %v + %v s", r0.FirstBatchSeconds, r0.StartWaitSeconds, r0.Seconds)
	}
	if r0.Refined != enginetest.Samples || !r0.Replanned {
		t.Errorf("first epoch: refined %d (replanned %v), want all %d samples measured and a new plan", r0.Refined, r0.Replanned, enginetest.Samples)
	}
}

// estimateRun starts a real storage agent on data (a fresh image folder
// when empty), runs a No-Off reference of epochs epochs against it and
// returns the config of a run of policy pol without a saved profile, its
// recorder and the reference's; both run pipe[0] where given.
func estimateRun(t *testing.T, data, pol string, epochs int, pipe ...*ops.Pipeline) (testSetup, *recorder, *recorder) {
	t.Helper()
	if data == "" {
		data = writeImageFolder(t, -1)
	}
	n := bufNet{"st1:7070": bufconn.Listen(1 << 20)}
	startStorage(t, storageagent.Config{Data: data, Name: "st1", CPUs: 1, AllowClientSpecs: true, Insecure: true}, storageagent.Knobs{}, n["st1:7070"])
	cfg, ref := testConfig(t, nil, "st1:7070")
	cfg.Dial = n.Dial
	cfg.Epochs = epochs
	if len(pipe) > 0 {
		cfg.Pipeline = pipe[0]
	}
	if _, err := runAgent(t, cfg); err != nil {
		t.Fatal(err)
	}
	cfg, rec := testConfig(t, nil, "st1:7070")
	cfg.Dial = n.Dial
	if len(pipe) > 0 {
		cfg.Pipeline = pipe[0]
	}
	cfg.Policy = pol
	cfg.Epochs = epochs
	cfg.Logger = testLogger(t)
	return cfg, rec, ref
}

// runEpochs runs cfg and returns its reports, which must be epochs.
func runEpochs(t *testing.T, cfg testSetup, epochs int) []report.EpochReport {
	t.Helper()
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != epochs {
		t.Fatalf("%d reports, want %d", len(reports), epochs)
	}
	return reports
}

// sameAsNoOff checks that every reported epoch delivered each sample once
// with the tensors of the No-Off run ref.
func sameAsNoOff(t *testing.T, rec, ref *recorder, reports []report.EpochReport) {
	t.Helper()
	for _, r := range reports {
		if got, want := epochSHAs(t, rec, r.Epoch), epochSHAs(t, ref, r.Epoch); !maps.Equal(got, want) {
			t.Errorf("epoch %d: tensors differ from No-Off's", r.Epoch)
		}
	}
}

// epochSHAs maps each sample of epoch e, delivered once, to its tensor's
// hash.
func epochSHAs(t *testing.T, rec *recorder, e uint64) map[uint64][32]byte {
	t.Helper()
	return shasOf(t, rec, e, allSamples())
}

// TestPlanFromEstimatesShortEpoch: a first epoch that may end before
// stage 1 beside it has planned (a fast consumer, a small shard) still
// delivers every sample once with No-Off's tensors; if it ran its
// provisional plan throughout, the plan starts with the next epoch, and
// either way the second epoch runs the policy's plan.
func TestPlanFromEstimatesShortEpoch(t *testing.T) {
	cfg, rec, ref := estimateRun(t, "", policy.NameSOPHON, 2)
	reports := runEpochs(t, cfg, 2)
	r0, r1 := reports[0], reports[1]
	if r0.Stage1 == nil || !r0.Stage1.Overlapped {
		t.Fatalf("first epoch's stage 1 %+v, want overlapped", r0.Stage1)
	}
	if r0.PlanSwitchedAt == 0 && (r0.Plan != planner.ProvisionalName || r0.PlanSource != "") {
		t.Errorf("first epoch never switched but reports plan %q from %q", r0.Plan, r0.PlanSource)
	}
	checkPlanned(t, r1, policy.NameSOPHON)
	if r1.PlanSource == "" {
		t.Errorf("second epoch: no plan source, want the estimate's plan")
	}
	sameAsNoOff(t, rec, ref, reports)
	t.Logf("first epoch: plan %q, switched after %d of %d", r0.Plan, r0.PlanSwitchedAt, r0.Shard)
}

// TestPlanFromEstimatesFillsCache: a run planned from estimates with a
// cache fills it in its first epoch. The provisional plan keeps nothing
// resident; once the estimate's plan takes over, the positions left whose
// samples it keeps resident go raw and fill the cache, so the second epoch
// reads them locally (before, only the calibration samples were filled in
// the first epoch and the second filled the rest).
func TestPlanFromEstimatesFillsCache(t *testing.T) {
	data := writeImageFolder(t, -1)
	cfg, rec, ref := estimateRun(t, data, policy.NameOptimal, 2)
	cfg.ProfileBudget = 150 * time.Millisecond
	// The first epoch's consumer waits for the plan to take over, so
	// that few positions go out before it whatever the machine's speed.
	sw := &signalWriter{match: "plan switched mid-epoch", seen: make(chan struct{})}
	cfg.Logger = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), sw)).Level(zerolog.InfoLevel)
	cfg.Consumer = untilSwitched{sw.seen}
	cfg.CacheDir, cfg.CacheBytes = t.TempDir(), cache.Size(folderBytes(t, data)/3)
	// A small window, batch and pool: few positions go out before the
	// plan takes over while the consumer waits for it.
	cfg.Window, cfg.Batch, cfg.Workers = 1, 2, 1
	reports := runEpochs(t, cfg, 2)
	r0, r1 := reports[0], reports[1]
	sameAsNoOff(t, rec, ref, reports)
	c0, c1 := r0.Cache, r1.Cache
	if c0 == nil || c1 == nil || r0.PlanSwitchedAt <= 0 {
		t.Fatalf("cache %+v then %+v, plan switched after %d: want a cache and a switch", c0, c1, r0.PlanSwitchedAt)
	}
	// The first epoch fills the calibration samples (raw under the
	// provisional plan) and the resident samples not requested before
	// the switch: here all of them, as the switch comes within the first
	// positions. Before, it filled only the calibration samples (wanted =
	// planner.CalibrationSamples), and the second epoch missed the rest.
	// The second may miss 2: one that does not fit beside the others, or
	// whose write was still queued when it began.
	calib := planner.CalibrationSamples
	added := c0.Wanted - calib
	if added <= 0 || c0.Fills < c0.Wanted-2 || c1.Misses > 2 || c1.Hits < c1.Wanted-2 {
		t.Errorf("first epoch wanted %d (%d beyond the calibration samples) and filled %d, switched after %d; second epoch %d hits, %d misses of %d resident",
			c0.Wanted, added, c0.Fills, r0.PlanSwitchedAt, c1.Hits, c1.Misses, c1.Wanted)
	}
	t.Logf("switched after %d of %d; epoch 0 cache %+v; epoch 1 cache %+v", r0.PlanSwitchedAt, r0.Shard, c0, c1)
}

// folderBytes is the bytes of the files in dir and its subfolders.
func folderBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var sum int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		sum += fi.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// signalWriter closes seen at the first log line containing match.
type signalWriter struct {
	match string
	seen  chan struct{}
	once  sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.match)) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// untilSwitched holds epoch 0's batches until switched is closed (at most
// 5 s, so that a plan that never switches fails the test's checks rather
// than hanging it).
type untilSwitched struct{ switched <-chan struct{} }

func (c untilSwitched) Consume(ctx context.Context, b *Batch) error {
	if b.Epoch == 0 {
		select {
		case <-c.switched:
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
		}
	}
	return ctx.Err()
}
