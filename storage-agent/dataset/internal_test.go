package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

// TestReadTooLarge: a sample above MaxSampleBytes fails with
// ops.ErrTooLarge before anything is allocated or read.
func TestReadTooLarge(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "x.jpg"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := OpenWith(dir, OpenOptions{Index: "-"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.samples[0].size = MaxSampleBytes + 1
	if _, err := d.Read(0); !errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("Read of a huge sample = %v, want ops.ErrTooLarge", err)
	}
}

func FuzzLoadIndex(f *testing.F) {
	dir := "/data"
	f.Add(encodeIndex(dir, []sample{{rel: "a/x.jpg", size: 10, id: fileID{ino: 3}, mtime: -5}, {rel: "b", off: 512}}))
	f.Add(encodeIndex(dir, nil))
	f.Add([]byte(indexMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeIndex(b, dir)
		if err != nil {
			return
		}
		var ss []sample
		for rel, e := range m {
			ss = append(ss, sample{rel: rel, size: int64(e.size), off: int64(e.off), id: fileID{ino: e.ino}, mtime: e.mtime, hash: e.hash})
		}
		m2, err := decodeIndex(encodeIndex(dir, ss), dir)
		if err != nil || len(m2) != len(m) {
			t.Fatalf("re-encoded index: %v, %d entries, want %d", err, len(m2), len(m))
		}
	})
}
