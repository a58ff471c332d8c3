package computeagent

import (
	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"

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
func rogueFake(t *testing.T, name string) *enginetest.Storage {
	s := enginetest.NewStorage(t, name)
	s.CatData = s.Data
	s.Data = make([][]byte, len(s.CatData))
	for i, b := range s.CatData {
		c := append([]byte(nil), b...)
		c[len(c)-3] ^= 0x01 // in the entropy-coded data, near the end
		s.Data[i] = c
	}
	return s
}

func TestRawContentMismatch(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "good:1", enginetest.NewStorage(t, "good"))
	n.Serve(t, "rogue:1", rogueFake(t, "rogue"))

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
	n := &enginetest.MemNet{}
	forged := rogueFake(t, "forged")
	forged.CatData = nil                                                // hashes of what it serves...
	forged.ForgeFP = enginetest.NewStorage(t, "x").CatalogFingerprint() // ...under the honest fingerprint
	forged.Fingerprint = forged.ForgeFP
	n.Serve(t, "forged:1", forged)
	cfg, _ := testConfig(t, n, "forged:1")
	_, err := runAgent(t, cfg)
	if !errors.Is(err, ErrCatalog) || !errors.Is(err, ErrFingerprint) {
		t.Fatalf("got %v, want ErrCatalog and ErrFingerprint", err)
	}
	if forged.Requests() != 0 {
		t.Errorf("forged agent got %d requests", forged.Requests())
	}
}

// TestCatalogPaths: a catalog's paths, checked against its paths digest,
// name the file of every failed sample in the report; paths that do not
// give the digest make the catalog bad.
func TestCatalogPaths(t *testing.T) {
	const bad = 13
	paths := func(prefix string) []string {
		var ps []string
		for i := range enginetest.Samples {
			ps = append(ps, fmt.Sprintf("%s/%03d.jpg", prefix, i))
		}
		return ps
	}
	n := &enginetest.MemNet{}
	honest := enginetest.NewStorage(t, "honest")
	honest.Paths = paths("class\x01/\xff") // not printable: reports quote it
	honest.Paths[2] = "class/\xffodd.jpg"
	honest.Data = slices.Clone(honest.Data)
	honest.Data[bad] = honest.Data[bad][:len(honest.Data[bad])/2]
	n.Serve(t, "honest:1", honest)
	cfg, _ := testConfig(t, n, "honest:1")
	cfg.OnError = OnErrorSkip
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f := reports[0].Failed; len(f) != 1 || f[0].Sample != bad || f[0].Path != strconv.Quote(honest.Paths[bad]) || !strings.Contains(f[0].Error(), f[0].Path) {
		t.Errorf("failed %+v, want sample %d with path %q", f, bad, strconv.Quote(honest.Paths[bad]))
	}

	plain := enginetest.NewStorage(t, "plain")
	plain.Paths = paths("cats")
	plain.Data = honest.Data
	n.Serve(t, "plain:1", plain)
	cfg, _ = testConfig(t, n, "plain:1")
	cfg.OnError = OnErrorSkip
	if reports, err = runAgent(t, cfg); err != nil {
		t.Fatal(err)
	}
	if f := reports[0].Failed; len(f) != 1 || f[0].Path != "cats/013.jpg" {
		t.Errorf("failed %+v, want cats/013.jpg", f)
	}

	liar := enginetest.NewStorage(t, "liar")
	liar.Paths = paths("cats")
	liar.SentPaths = slices.Clone(liar.Paths)
	liar.SentPaths[5], liar.SentPaths[6] = liar.SentPaths[6], liar.SentPaths[5]
	n.Serve(t, "liar:1", liar)
	cfg, _ = testConfig(t, n, "liar:1")
	if _, err := runAgent(t, cfg); !errors.Is(err, ErrCatalog) || !strings.Contains(err.Error(), "paths") {
		t.Errorf("paths not matching the digest: got %v, want ErrCatalog", err)
	}
}
