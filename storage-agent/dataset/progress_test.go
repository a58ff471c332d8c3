package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestRates(t *testing.T) {
	tests := []struct {
		name                                 string
		files, bytes, totalFiles, totalBytes int64
		elapsed                              time.Duration
		wantFPS, wantBPS                     float64
		wantETA                              time.Duration
	}{
		{"by bytes", 10, 1000, 100, 4000, 2 * time.Second, 5, 500, 6 * time.Second},
		{"by files when the bytes are unknown", 10, 1000, 100, 0, 2 * time.Second, 5, 500, 18 * time.Second},
		{"unknown totals", 10, 1000, 0, 0, 2 * time.Second, 5, 500, -1},
		{"nothing done yet", 0, 0, 100, 4000, 2 * time.Second, 0, 0, -1},
		{"no time yet", 0, 0, 100, 4000, 0, 0, 0, -1},
		{"done", 100, 4000, 100, 4000, 4 * time.Second, 25, 1000, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rates(tt.files, tt.bytes, tt.totalFiles, tt.totalBytes, tt.elapsed)
			if r.filesPerS != tt.wantFPS || r.bytesPerS != tt.wantBPS || r.eta != tt.wantETA {
				t.Errorf("got %.1f files/s, %.1f B/s, eta %v; want %.1f, %.1f, %v", r.filesPerS, r.bytesPerS, r.eta, tt.wantFPS, tt.wantBPS, tt.wantETA)
			}
		})
	}
}

// TestIndexProgress: hashing a dataset that takes longer than the
// interval logs progress lines with files/s, bytes/s and an ETA, and a
// last line with everything done; with a negative interval, none.
func TestIndexProgress(t *testing.T) {
	dir := t.TempDir()
	const files, size = 1000, 16 << 10
	buf := make([]byte, size)
	for i := range files {
		buf[0], buf[1] = byte(i), byte(i>>8)
		name := filepath.Join(dir, fmt.Sprint("c", i%2), fmt.Sprintf("%05d.jpg", i))
		if i < 2 {
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(name, buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	d, err := OpenWith(dir, OpenOptions{Index: "-", Workers: 1, Progress: time.Millisecond, Logger: zerolog.New(&out)})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	var lines []map[string]any
	for l := range strings.Lines(out.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["message"] != "indexing progress" {
			continue
		}
		switch m["phase"] {
		case "hashing":
			lines = append(lines, m)
		case "listing": // may be too quick to log; its total is unknown
			if _, ok := m["eta"]; ok || m["files"] == nil || m["files_per_s"] == nil || m["files_total"] != nil {
				t.Errorf("listing line %v: want files and rates, no total and no eta", m)
			}
		default:
			t.Errorf("progress line of phase %v", m["phase"])
		}
	}
	if len(lines) < 2 {
		t.Fatalf("%d hashing progress lines, want at least 2 (one while hashing, the last one); log:\n%s", len(lines), out.String())
	}
	first, last := lines[0], lines[len(lines)-1]
	for _, k := range []string{"files", "files_total", "bytes", "bytes_total", "files_per_s", "bytes_per_s", "elapsed", "phase"} {
		if _, ok := first[k]; !ok {
			t.Errorf("progress line lacks %s: %v", k, first)
		}
	}
	if _, ok := first["eta"]; !ok && first["files"].(float64) > 0 {
		t.Errorf("progress line lacks an eta: %v", first)
	}
	if last["files"].(float64) != files || last["bytes"].(float64) != files*size || last["files_total"].(float64) != files || last["eta"] != "0s" {
		t.Errorf("last line %v, want %d files of %d bytes done, eta 0s", last, files, files*size)
	}
	out.Reset()
	d, err = OpenWith(dir, OpenOptions{Index: "-", Workers: 1, Progress: -1, Logger: zerolog.New(&out)})
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if strings.Contains(out.String(), "indexing progress") {
		t.Errorf("progress logged with a negative interval:\n%s", out.String())
	}
}
