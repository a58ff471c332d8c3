package main

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/policy/cacheplan"
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

// TestCacheBytesFlagsAgree: compute-agent --cache-bytes and policy explain
// --cache-bytes (cacheplan.ParseBudget) read every size to the same bytes:
// 2G is 2 GiB in both, 2GB 2*10^9, so a plan made with policy explain
// has the budget the agent gets. They refuse the same strings too.
func TestCacheBytesFlagsAgree(t *testing.T) {
	for _, in := range []string{"4096", "2G", "2g", "2GiB", "2GB", "512M", "512MiB", "512MB", "1.5G", "1.5GB", "10 KiB", "3k", "3kB", "1T", "1TB", "7b"} {
		s, err := parse([]string{"--storage", "a:1", "--cache-bytes", in}, io.Discard)
		if err != nil {
			t.Errorf("compute-agent --cache-bytes %q: %v", in, err)
			continue
		}
		b, err := cacheplan.ParseBudget(in, 1e15)
		if err != nil {
			t.Errorf("policy explain --cache-bytes %q: %v", in, err)
			continue
		}
		if int64(s.CacheBytes) != int64(b) {
			t.Errorf("--cache-bytes %q: compute-agent %d bytes, policy explain %.0f", in, int64(s.CacheBytes), b)
		}
	}
	if s, _ := parse([]string{"--storage", "a:1", "--cache-bytes", "2G"}, io.Discard); s.CacheBytes != 2<<30 {
		t.Errorf("compute-agent --cache-bytes 2G: %d bytes, want 2 GiB", int64(s.CacheBytes))
	}
	for _, in := range []string{"lots", "-1", "2Gi", "inf"} {
		_, errAgent := parse([]string{"--storage", "a:1", "--cache-bytes", in}, io.Discard)
		_, errPolicy := cacheplan.ParseBudget(in, 1e15)
		if errAgent == nil || errPolicy == nil {
			t.Errorf("--cache-bytes %q: compute-agent %v, policy explain %v; want both refused", in, errAgent, errPolicy)
		}
	}
}

// TestConnsFlag: --conns reaches the agent's Config (its bounds are
// Config's: TestConfigValidation).
func TestConnsFlag(t *testing.T) {
	s, err := parse([]string{"--storage", "a:1", "--conns", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.agentConfig(zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if c.Conns != 4 {
		t.Errorf("--conns 4: config has %d", c.Conns)
	}
}
