package computeagent

import (
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// TestTooLargeFileSameUnderEveryPlan: a 70 MiB JPEG (a small image behind a
// huge EXIF block) that cannot cross raw in one message fails as TOO_LARGE,
// naming its file, under No-Off (the compute agent's local path: raw bytes,
// every op here), All-Off and a plan that offloads the decode alone (split
// 1, whose intermediate would be small): the delivered samples and their
// tensors are the same under every plan, so what the model sees does not
// depend on the plan.
func TestTooLargeFileSameUnderEveryPlan(t *testing.T) {
	dir := writeImageFolder(t, -1)
	big := filepath.Join(dir, "class0", "000.jpg")
	b, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte{}, b[:2]...) // SOI, then APP1 segments up to 70 MiB
	seg := make([]byte, 4+65533)
	seg[0], seg[1], seg[2], seg[3] = 0xFF, 0xE1, 0xFF, 0xFF
	for len(out) < 70<<20 {
		out = append(out, seg...)
	}
	if err := os.WriteFile(big, append(out, b[2:]...), 0o644); err != nil {
		t.Fatal(err)
	}
	n := bufNet{"st1:7070": bufconn.Listen(1 << 20)}
	startStorage(t, storageagent.Config{Data: dir, Name: "st1:7070", CPUs: 1, AllowClientSpecs: true, Insecure: true}, storageagent.Knobs{}, n["st1:7070"])
	p := enginetest.Pipeline(t)
	splits := map[uint64]int{}
	for s := range uint64(enginetest.Samples) {
		splits[s] = 1
	}
	var ref map[uint64][32]byte
	for _, plan := range []*policy.Plan{planner.NoOff(), planner.AllOff(p), planner.PlanOf("decode-off", p.ID(), 0, splits)} {
		cfg, rec := testConfig(t, nil, "st1:7070")
		cfg.Dial = n.Dial
		cfg.Plan = plan
		cfg.OnError = OnErrorSkip
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatalf("%s: %v", plan.Policy, err)
		}
		r := reports[0]
		if r.SamplesFailed != 1 || r.Failed[0].Kind != "TOO_LARGE" || !strings.Contains(r.Failed[0].Message, "000.jpg") {
			t.Fatalf("%s: %d failed, the first %+v; want the 70 MiB file alone, TOO_LARGE, named", plan.Policy, r.SamplesFailed, r.Failed[:min(1, len(r.Failed))])
		}
		m := map[uint64][32]byte{}
		for _, d := range rec.epoch(0) {
			m[d.sample] = d.sha
		}
		if len(m) != enginetest.Samples-1 {
			t.Errorf("%s: %d samples delivered, want %d", plan.Policy, len(m), enginetest.Samples-1)
		}
		if ref == nil {
			ref = m
		} else if !maps.Equal(ref, m) {
			t.Errorf("%s: delivered samples or tensors differ from nooff's", plan.Policy)
		}
	}
}
