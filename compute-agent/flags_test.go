package main

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/oplimits"
)

// TestLimitFlags: the decode and op limits take the storage agent's flags,
// config keys and defaults, and reach the agent's Config.
func TestLimitFlags(t *testing.T) {
	s, err := parse([]string{"--storage", "a:1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.Settings != oplimits.Default() {
		t.Errorf("defaults %+v, want %+v", s.Settings, oplimits.Default())
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	writeFile(t, file, "max-scans: 9\ndecode-memory: 1048576\nop-timeout: 3s\n")
	s, err = parse([]string{"--config", file, "--storage", "a:1", "--max-pixels", "1000", "--max-output-bytes", "2048", "--op-timeout", "2s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.agentConfig(zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	want := oplimits.Settings{MaxPixels: 1000, MaxScans: 9, DecodeMemory: 1 << 20, MaxOutputBytes: 2048, OpTimeout: 2 * time.Second}
	if c.Settings != want {
		t.Errorf("config %+v, want %+v", c.Settings, want)
	}
	if _, err := parse([]string{"--storage", "a:1", "--max-pixels", "lots"}, io.Discard); err == nil {
		t.Error("--max-pixels lots: no error")
	}
}
