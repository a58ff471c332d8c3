package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStartCPUProfile: --cpu-profile writes a Go CPU profile (gzip'd
// protobuf) when stopped; without it nothing is written, and a file that
// cannot be created is an error naming the flag.
func TestStartCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	stop, err := Common{CPUProfile: path}.StartCPUProfile()
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	stop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("profile of %d bytes does not start as gzip: % x", len(b), b[:min(len(b), 4)])
	}
	stop, err = Common{}.StartCPUProfile()
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := (Common{CPUProfile: filepath.Join(t.TempDir(), "no", "such", "dir", "x")}).StartCPUProfile(); err == nil {
		t.Error("a profile in a missing folder: no error")
	}
}
