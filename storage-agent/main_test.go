package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want uint64 // bytes per second
		ok   bool
	}{
		{"500mbit", 62_500_000, true},
		{"10gbit", 1_250_000_000, true},
		{"1.25gbps", 1_250_000_000, true},
		{"64kibit", 8192, true},
		{"1mibps", 1 << 20, true},
		{"8000", 1000, true}, // a bare number is bits per second, as in tc
		{" 100MBit ", 12_500_000, true},
		{"0", 0, true},
		{"0mbit", 0, true},
		{"62500000bps", 62_500_000, true},
		{"", 0, false},
		{"fast", 0, false},
		{"-5mbit", 0, false},
		{"1bit", 0, false}, // below a byte per second
		{"NaNmbit", 0, false},
		{"infgbit", 0, false},
		{"1e30tbit", 0, false},
	}
	for _, tt := range tests {
		got, err := parseRate(tt.in)
		if tt.ok && (err != nil || got != tt.want) {
			t.Errorf("parseRate(%q): got %d, %v, want %d", tt.in, got, err, tt.want)
		}
		if !tt.ok && err == nil {
			t.Errorf("parseRate(%q): got %d, want an error", tt.in, got)
		}
	}
	// String parses back.
	r := rate(62_500_000)
	var back rate
	if err := back.Set(r.String()); err != nil || back != r {
		t.Errorf("Set(%q): got %d, %v, want %d", r.String(), back, err, r)
	}
}

// TestPlacementFlags: --replicas, --shard-size and --egress reach the
// agent's Config, from the command line or the config file, and default to
// 2, 1024 and unknown.
func TestPlacementFlags(t *testing.T) {
	var out bytes.Buffer
	s, err := parse([]string{"--data", "d"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	c := s.agentConfig(zerolog.Nop())
	if c.Replicas != placement.DefaultReplicas || c.ShardSize != placement.DefaultShardSize || c.Egress != 0 || c.SendBuffer != storageagent.DefaultSendBuffer {
		t.Errorf("defaults: replicas %d, shard size %d, egress %d, send buffer %d; want %d, %d, 0, %d",
			c.Replicas, c.ShardSize, c.Egress, c.SendBuffer, placement.DefaultReplicas, placement.DefaultShardSize, storageagent.DefaultSendBuffer)
	}
	s, err = parse([]string{"--data", "d", "--replicas", "0", "--shard-size", "256", "--egress", "500mbit", "--send-buffer", "0"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.agentConfig(zerolog.Nop()); c.Replicas != 0 || c.ShardSize != 256 || c.Egress != 62_500_000 || c.SendBuffer != 0 {
		t.Errorf("flags: replicas %d, shard size %d, egress %d, send buffer %d; want 0, 256, 62500000, 0", c.Replicas, c.ShardSize, c.Egress, c.SendBuffer)
	}
	if _, err := parse([]string{"--data", "d", "--egress", "fast"}, &out); err == nil {
		t.Error("--egress fast: parsed, want an error")
	}

	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte("data: d\nreplicas: 3\nshard-size: 100\negress: 10gbit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = parse([]string{"--config", file, "--replicas", "4"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.agentConfig(zerolog.Nop()); c.Replicas != 4 || c.ShardSize != 100 || c.Egress != 1_250_000_000 {
		t.Errorf("config file: replicas %d, shard size %d, egress %d; want 4 (the flag), 100, 1250000000", c.Replicas, c.ShardSize, c.Egress)
	}
	if err := os.WriteFile(file, []byte("data: d\negress: [1, 2]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parse([]string{"--config", file}, &out); err == nil {
		t.Error("egress: [1, 2] in the config file: parsed, want an error")
	}

	out.Reset()
	fs := flagSet(&settings{}, &out)
	fs.Usage()
	for _, flag := range []string{"-replicas", "-shard-size", "-egress", "-send-buffer", "Shards and replicas"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("--help does not document %s", flag)
		}
	}
}

// TestManifestAndPlace: "manifest" writes a full dataset's manifest and
// "place" lists each member's files from it: every file once per replica,
// and with --member only that member's paths.
func TestManifestAndPlace(t *testing.T) {
	data := t.TempDir()
	for i, rel := range []string{"a/x.jpg", "a/y.jpg", "b/z.jpg"} {
		img, err := synth.JPEG(uint64(i), 64, 48, synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(data, filepath.Dir(rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, rel), img, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	man := filepath.Join(t.TempDir(), "m")
	var out, errs bytes.Buffer
	if rc := manifestCmd([]string{"--data", data, "--out", man, "--index", "-"}, &out, &errs); rc != 0 || !strings.Contains(out.String(), "3 samples, 2 classes") {
		t.Fatalf("manifest: rc %d, out %q, err %q", rc, out.String(), errs.String())
	}
	out.Reset()
	if rc := placeCmd([]string{"--manifest", man, "--members", "s1,s2", "--replicas", "2", "--shard-size", "2"}, &out, &errs); rc != 0 {
		t.Fatalf("place: rc %d, err %q", rc, errs.String())
	}
	want := "s1\ta/x.jpg\ns1\ta/y.jpg\ns1\tb/z.jpg\ns2\ta/x.jpg\ns2\ta/y.jpg\ns2\tb/z.jpg\n"
	if out.String() != want {
		t.Errorf("place, R=2 over 2: got %q, want %q", out.String(), want)
	}
	out.Reset()
	if rc := placeCmd([]string{"--manifest", man, "--members", "s1,s2", "--replicas", "1", "--shard-size", "2", "--member", "s1"}, &out, &errs); rc != 0 {
		t.Fatalf("place --member: rc %d, err %q", rc, errs.String())
	}
	shardFiles := []string{"a/x.jpg\na/y.jpg\n", "b/z.jpg\n"}
	want = ""
	for _, s := range placement.Assign([]string{"s1", "s2"}, 2, 1)["s1"] {
		want += shardFiles[s]
	}
	if got := out.String(); got != want {
		t.Errorf("place --member s1, R=1: got %q, want %q", got, want)
	}
	for _, bad := range [][]string{
		{"--manifest", man}, // no members
		{"--manifest", man, "--members", "a", "--member", "b"}, // not a member
		{"--manifest", man, "--members", "a", "--replicas", "-1"},
	} {
		if rc := placeCmd(bad, &out, &errs); rc != 2 {
			t.Errorf("place %v: rc %d, want 2", bad, rc)
		}
	}
	if rc := placeCmd([]string{"--manifest", data, "--members", "a"}, &out, &errs); rc != 1 {
		t.Errorf("place with a directory for a manifest: rc %d, want 1", rc)
	}
}
