package cache

import (
	"crypto/sha256"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// TestValues: a raw file is kept as itself and served when it matches
// the catalog's hash (dropped when it does not); a finished output is kept
// as its wire form and served decoded.
func TestValues(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "c"), 1<<20, "")
	lim := wireform.Limits{MaxPayload: 1 << 20}
	raw := ops.Encoded(payload(1, 500))
	hashes := map[uint64][32]byte{1: sha256.Sum256(raw), 2: {1}}
	hash := func(s uint64) ([32]byte, bool) { h, ok := hashes[s]; return h, ok }

	v := s.View(fp, "p@1", 0, nil)
	if v.PutValue(1, &ops.Tensor{}, nil) {
		t.Error("split 0 kept a value that is not a raw file")
	}
	for _, sample := range []uint64{1, 2, 3} {
		if !v.PutValue(sample, raw, nil) {
			t.Fatalf("sample %d: put refused", sample)
		}
	}
	s.Drain()
	if got, n, err := v.GetValue(1, lim, hash); err != nil || !reflect.DeepEqual(got, raw) || n <= 0 {
		t.Errorf("raw file: %v, %d bytes, %v", got, n, err)
	}
	if _, _, err := v.GetValue(2, lim, hash); !errors.Is(err, ErrEntry) || v.Has(2) {
		t.Errorf("a raw file that does not match its hash: %v, kept %v; want ErrEntry, dropped", err, v.Has(2))
	}
	if _, _, err := v.GetValue(3, lim, hash); err != nil {
		t.Errorf("a sample without a hash: %v", err)
	}

	out := &ops.Tensor{C: 1, H: 2, W: 2, Data: []float32{1, 2, 3, 4}}
	f := s.View(fp, "p@1", 3, nil)
	if !f.PutValue(4, raw, out) {
		t.Fatal("finished output: put refused")
	}
	s.Drain()
	if got, _, err := f.GetValue(4, lim, hash); err != nil || !reflect.DeepEqual(got, out) {
		t.Errorf("finished output: got %+v, %v; want %+v", got, err, out)
	}
	if _, _, err := f.GetValue(4, wireform.Limits{MaxPayload: 4}, hash); !errors.Is(err, ErrEntry) {
		t.Errorf("a finished output over the limits: %v, want ErrEntry", err)
	}
}
