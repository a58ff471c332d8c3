package computeagent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// rogueFake serves every sample with one byte changed under the honest
// catalog (same paths, sizes, labels, hashes: same fingerprint).
func rogueFake(t *testing.T, name string) *fakeStorage {
	s := newFake(t, name)
	s.catData = s.data
	s.data = make([][]byte, len(s.catData))
	for i, b := range s.catData {
		c := append([]byte(nil), b...)
		c[len(c)-3] ^= 0x01 // in the entropy-coded data, near the end
		s.data[i] = c
	}
	return s
}

func TestRawContentMismatch(t *testing.T) {
	n := &memNet{}
	n.serve(t, "good:1", newFake(t, "good"))
	n.serve(t, "rogue:1", rogueFake(t, "rogue"))

	// The reference: the honest agent alone.
	cfg, ref := testConfig(t, n, "good:1")
	if _, err := runAgent(t, cfg); err != nil {
		t.Fatal(err)
	}
	want := map[uint64][32]byte{}
	for _, d := range ref.epoch(0) {
		want[d.sample] = d.sha
	}

	cfg, rec := testConfig(t, n, "good:1", "rogue:1")
	cfg.OnError = OnErrorSkip
	cfg.Epochs = 2
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reports, err := a.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.refusals.Refusal("rogue:1"); !errors.Is(err, ErrContentMismatch) {
		t.Fatalf("rogue refusal = %v, want ErrContentMismatch", err)
	}
	failed := 0
	for _, r := range reports {
		for _, f := range r.Failed {
			failed++
			if f.Kind != "CONTENT" || !strings.Contains(f.Message, "rogue:1") || !strings.Contains(f.Message, "sample ") {
				t.Errorf("failure %+v, want CONTENT naming the sample and rogue:1", f)
			}
		}
	}
	if failed == 0 {
		t.Error("no sample failed: the rogue's bytes were never checked")
	}
	if len(reports) == 2 && (reports[1].SamplesFailed != 0 || strings.Contains(strings.Join(reports[1].Storage, ","), "rogue")) {
		t.Errorf("epoch 1 used %v with %d failures; the rogue must be refused for the run", reports[1].Storage, reports[1].SamplesFailed)
	}
	for _, e := range []uint64{0, 1} {
		for _, d := range rec.epoch(e) {
			if e == 0 && d.sha != want[d.sample] {
				t.Errorf("epoch 0: sample %d delivered from the rogue's bytes", d.sample)
			}
		}
	}
}

func TestCatalogForgedFingerprint(t *testing.T) {
	n := &memNet{}
	forged := rogueFake(t, "forged")
	forged.catData = nil                                  // hashes of what it serves...
	forged.forgeFP = newFake(t, "x").catalogFingerprint() // ...under the honest fingerprint
	forged.fingerprint = forged.forgeFP
	n.serve(t, "forged:1", forged)
	cfg, _ := testConfig(t, n, "forged:1")
	_, err := runAgent(t, cfg)
	if !errors.Is(err, ErrCatalog) || !errors.Is(err, ErrFingerprint) {
		t.Fatalf("got %v, want ErrCatalog and ErrFingerprint", err)
	}
	if forged.requests.Load() != 0 {
		t.Errorf("forged agent got %d requests", forged.requests.Load())
	}
}
