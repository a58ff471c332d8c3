package journal

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestLazy: the journal opens at the first Open and is the same at the
// next (whatever plan it names); none without a path; after Close (safe
// twice) an Open that would open one fails with ErrClosed.
func TestLazy(t *testing.T) {
	dir := t.TempDir()
	l := &Lazy{Dir: filepath.Join(dir, "state"), Run: RunState{Seed: 1, World: 1}}
	j, err := l.Open("fp", "nooff")
	if err != nil || j == nil {
		t.Fatalf("Open: %v, %v", j, err)
	}
	if j2, err := l.Open("fp", "other"); j2 != j || err != nil {
		t.Fatalf("second Open: %p, %v; want the first journal %p", j2, err, j)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	fresh := &Lazy{Samples: filepath.Join(dir, "samples")}
	fresh.Close()
	if _, err := fresh.Open("fp", "nooff"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Open after Close: %v, want ErrClosed", err)
	}
	for _, l := range []*Lazy{nil, {}} {
		if j, err := l.Open("fp", "nooff"); j != nil || err != nil {
			t.Fatalf("no journal: %v, %v", j, err)
		}
	}
}
