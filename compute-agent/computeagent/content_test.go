package computeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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

// TestCatalogPaths: a catalog's paths, checked against its paths digest,
// name the file of every failed sample in the report; paths that do not
// give the digest make the catalog bad.
func TestCatalogPaths(t *testing.T) {
	const bad = 13
	paths := func(prefix string) []string {
		var ps []string
		for i := range testSamples {
			ps = append(ps, fmt.Sprintf("%s/%03d.jpg", prefix, i))
		}
		return ps
	}
	n := &memNet{}
	honest := newFake(t, "honest")
	honest.paths = paths("class\x01/\xff") // not printable: reports quote it
	honest.paths[2] = "class/\xffodd.jpg"
	honest.data = slices.Clone(honest.data)
	honest.data[bad] = honest.data[bad][:len(honest.data[bad])/2]
	n.serve(t, "honest:1", honest)
	cfg, _ := testConfig(t, n, "honest:1")
	cfg.OnError = OnErrorSkip
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f := reports[0].Failed; len(f) != 1 || f[0].Sample != bad || f[0].Path != strconv.Quote(honest.paths[bad]) || !strings.Contains(f[0].Error(), f[0].Path) {
		t.Errorf("failed %+v, want sample %d with path %q", f, bad, strconv.Quote(honest.paths[bad]))
	}

	plain := newFake(t, "plain")
	plain.paths = paths("cats")
	plain.data = honest.data
	n.serve(t, "plain:1", plain)
	cfg, _ = testConfig(t, n, "plain:1")
	cfg.OnError = OnErrorSkip
	if reports, err = runAgent(t, cfg); err != nil {
		t.Fatal(err)
	}
	if f := reports[0].Failed; len(f) != 1 || f[0].Path != "cats/013.jpg" {
		t.Errorf("failed %+v, want cats/013.jpg", f)
	}

	liar := newFake(t, "liar")
	liar.paths = paths("cats")
	liar.sentPaths = slices.Clone(liar.paths)
	liar.sentPaths[5], liar.sentPaths[6] = liar.sentPaths[6], liar.sentPaths[5]
	n.serve(t, "liar:1", liar)
	cfg, _ = testConfig(t, n, "liar:1")
	if _, err := runAgent(t, cfg); !errors.Is(err, ErrCatalog) || !strings.Contains(err.Error(), "paths") {
		t.Errorf("paths not matching the digest: got %v, want ErrCatalog", err)
	}
}
