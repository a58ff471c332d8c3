package computeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// TestHeaderBombsPlannedAsFailures: header-only 65535x65535 bombs (700
// bytes each) among the generated images, the optimal policy and no saved
// profile, so the first epoch is planned from the catalog's header
// estimates. The bombs fail in every epoch and are counted, named, as
// TOO_LARGE; they are not calibration samples and not priced as the
// 4.3 G-pixel decodes their headers claim: every planned epoch predicts
// within a factor of its measured time (priced as decodes, a bomb made
// predictions of 22-400 s for 1.8 s epochs), once planned the bombs go
// raw (split 0) and fail in the compute agent's decode, and every other
// sample is delivered with the tensors of a No-Off run.
func TestHeaderBombsPlannedAsFailures(t *testing.T) {
	for _, bombs := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d bombs", bombs), func(t *testing.T) {
			data := writeImageFolder(t, -1)
			names := map[string]bool{}
			for i := range bombs {
				name := fmt.Sprintf("class%d/bomb%02d.jpg", i%3, i)
				names[name] = true
				if err := os.WriteFile(filepath.Join(data, name), hostile.HeaderBomb(65535, 65535), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n := bufNet{"st1:7070": bufconn.Listen(1 << 20)}
			startStorage(t, storageagent.Config{Data: data, Name: "st1", CPUs: 1, AllowClientSpecs: true, Insecure: true}, storageagent.Knobs{}, n["st1:7070"])
			cfg, _ := testConfig(t, nil, "st1:7070")
			cfg.Dial, cfg.Policy, cfg.Epochs, cfg.OnError = n.Dial, policy.NameOptimal, 3, OnErrorSkip
			cfg.Logger = testLogger(t)
			for i, r := range runEpochs(t, cfg, 3) {
				if i > 0 { // the first may end before its plan is made
					checkPlanned(t, r, policy.NameOptimal)
				}
				if r.SamplesFailed != bombs || r.EpochSamples != enginetest.Samples {
					t.Fatalf("epoch %d: %d failed, %d delivered; want the %d bombs failed and all %d images", i, r.SamplesFailed, r.EpochSamples, bombs, enginetest.Samples)
				}
				for _, f := range r.Failed {
					if !names[f.Path] || f.Kind != "TOO_LARGE" || !strings.Contains(f.Message, "65535x65535") {
						t.Errorf("epoch %d: failure %+v, want a bomb's TOO_LARGE", i, f)
					}
					if i > 0 && (f.Split != 0 || f.Where != "local") {
						t.Errorf("epoch %d: bomb %s requested at split %d, failed %s; want raw (planned as a failure), failing in the local decode", i, f.Path, f.Split, f.Where)
					}
				}
				if !(r.PredictedSeconds > 0) || r.PredictedSeconds > 10*r.Seconds {
					t.Errorf("epoch %d: predicted %.3f s, measured %.3f s: the plan priced the bombs", i, r.PredictedSeconds, r.Seconds)
				}
			}
		})
	}
}
