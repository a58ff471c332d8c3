package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportCache: runs with a cache get the cache table, in the report
// and the printed table; runs without one do not.
func TestReportCache(t *testing.T) {
	r := synthetic(testGrid[:1])
	var text bytes.Buffer
	if err := Table(&text, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "cache (") {
		t.Errorf("a run without cache has a cache table:\n%s", text.String())
	}
	r.CacheBytes = 22.5e6
	c := &r.Cells[0]
	run := &c.Runs[0]
	run.Epochs[len(run.Epochs)-1].Cache = &CacheEpoch{Hits: 72, Misses: 3, ReadBytes: 21e6, ResidentSamples: 72, ResidentBytes: 22e6}
	text.Reset()
	if err := Table(&text, r); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, _, err := WriteReport(dir, r); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for where, out := range map[string]string{"table": text.String(), "report": string(md)} {
		for _, want := range []string{"22.5 MB", "72", "21.0", "22.0", rowName(run)} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q", where, want)
			}
		}
	}
	if rows := cacheTable(c); len(rows) != 1 || rows[0][3] != "72" || rows[0][4] != "3" {
		t.Errorf("cache rows %v, want one with 72 hits and 3 misses", rows)
	}
}
