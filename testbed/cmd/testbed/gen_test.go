package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

// TestWriteHeaderBombs: --header-bombs writes that many header-only
// 65535x65535 JPEGs, spread over the class folders.
func TestWriteHeaderBombs(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []string{"class_000", "class_001"} {
		if err := os.Mkdir(filepath.Join(dir, c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	paths, err := writeHeaderBombs(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"class_000/bomb00.jpg", "class_001/bomb01.jpg", "class_000/bomb02.jpg"}
	if len(paths) != len(want) {
		t.Fatalf("%d paths, want %d", len(paths), len(want))
	}
	for i, p := range paths {
		if rel, _ := filepath.Rel(dir, p); rel != want[i] {
			t.Errorf("bomb %d at %s, want %s", i, rel, want[i])
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := ops.ReadJPEGHeader(b); err != nil || h.W != 65535 || h.H != 65535 {
			t.Errorf("%s: header %+v, %v; want 65535x65535", p, h, err)
		}
	}
	if paths, err := writeHeaderBombs(dir, 0); err != nil || len(paths) != 0 {
		t.Errorf("no bombs: %v, %v", paths, err)
	}
}
