package s3gw

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestFind: the binary is found on PATH, else in GOPATH/bin, else the
// error says how to install it.
func TestFind(t *testing.T) {
	gopath, home := t.TempDir(), t.TempDir()
	t.Setenv("PATH", t.TempDir())
	t.Setenv("GOPATH", gopath)
	t.Setenv("HOME", home)
	if _, err := Find(); !errors.Is(err, ErrMissing) {
		t.Fatalf("nothing installed: %v, want ErrMissing", err)
	}
	bin := filepath.Join(gopath, "bin", Binary)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Find(); err != nil || got != bin {
		t.Fatalf("in GOPATH/bin: %q, %v; want %q", got, err, bin)
	}
}
