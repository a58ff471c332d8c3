package computeagent

import (
	"encoding/json"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/policy"
)

// TestBadSampleWarningsBounded: 60 bad files of 64, skipped, write the
// first engine.MaxSampleWarnings warn lines naming samples and one line
// saying how many more there were, per epoch, whichever side runs the
// ops, while the report lists every failure.
func TestBadSampleWarningsBounded(t *testing.T) {
	const nbad = 60
	p := enginetest.Pipeline(t)
	for _, plan := range []*policy.Plan{planner.NoOff(), planner.AllOff(p)} {
		t.Run(plan.Policy, func(t *testing.T) {
			s := enginetest.NewStorage(t, "s1")
			s.Data = slices.Clone(s.Data)
			for i := range nbad {
				s.Data[i] = s.Data[i][:len(s.Data[i])/2]
			}
			n := &enginetest.MemNet{}
			n.Serve(t, "s1:1", s)
			cfg, _ := testConfig(t, n, "s1:1")
			cfg.Plan = plan
			cfg.OnError = OnErrorSkip
			cfg.Epochs = 2
			var logs testutil.SyncBuffer
			cfg.Logger = zerolog.New(&logs).Level(zerolog.WarnLevel)
			reports, err := runAgent(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sampleLines, summaries := map[uint64]int{}, map[uint64][]float64{}
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				ep, _ := m["epoch"].(float64)
				switch {
				case m["sample"] != nil:
					sampleLines[uint64(ep)]++
				case m["suppressed"] != nil:
					summaries[uint64(ep)] = append(summaries[uint64(ep)], m["suppressed"].(float64), m["failed"].(float64))
				}
			}
			for e, r := range reports {
				if r.SamplesFailed != nbad || len(r.Failed) != nbad {
					t.Errorf("epoch %d: report failed %d (%d listed), want %d", e, r.SamplesFailed, len(r.Failed), nbad)
				}
				if got := sampleLines[uint64(e)]; got != engine.MaxSampleWarnings {
					t.Errorf("epoch %d: %d warn lines naming a sample, want %d", e, got, engine.MaxSampleWarnings)
				}
				want := []float64{nbad - engine.MaxSampleWarnings, nbad}
				if got := summaries[uint64(e)]; !slices.Equal(got, want) {
					t.Errorf("epoch %d: summary (suppressed, failed) %v, want one %v", e, got, want)
				}
			}
			if t.Failed() {
				t.Log(logs.String())
			}
		})
	}
}
