package cache

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestLazy: the cache opens at the first Open, with DefaultBuild's name
// when Options.Build is empty, and is the same at the next; none without
// a directory; after Close (safe twice) an Open that would open one fails
// with ErrClosed.
func TestLazy(t *testing.T) {
	dir := t.TempDir()
	builds := 0
	l := &Lazy{Options: Options{Dir: filepath.Join(dir, "c"), Bytes: 1 << 20}, DefaultBuild: func() string { builds++; return "test-build" }}
	if l.Store() != nil {
		t.Fatal("a store before Open")
	}
	s, err := l.Open()
	if err != nil || s == nil || l.Store() != s {
		t.Fatalf("Open: %v, %v (Store %v)", s, err, l.Store())
	}
	if s2, err := l.Open(); s2 != s || err != nil || builds != 1 {
		t.Fatalf("second Open: %p, %v, %d builds; want the first store %p, one build", s2, err, builds, s)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	fresh := &Lazy{Options: Options{Dir: filepath.Join(dir, "d"), Bytes: 1 << 20, Build: "b"}}
	fresh.Close()
	if _, err := fresh.Open(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Open after Close: %v, want ErrClosed", err)
	}
	for _, l := range []*Lazy{nil, {}} {
		if s, err := l.Open(); s != nil || err != nil {
			t.Fatalf("no cache: %v, %v", s, err)
		}
	}
}
