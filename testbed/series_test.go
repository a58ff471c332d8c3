package testbed

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

func TestSeriesDuring(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var s series
	s.add(t0, 100)
	s.add(t0.Add(time.Second), 200)
	s.add(t0.Add(3*time.Second), 600)
	for _, tc := range []struct {
		from, to time.Duration
		want     float64
	}{
		{0, time.Second, 100},
		{500 * time.Millisecond, 2 * time.Second, 250},
		{-time.Second, 10 * time.Second, 500}, // clamped to the samples
		{2 * time.Second, 2 * time.Second, 0},
	} {
		if got := s.during(t0.Add(tc.from), t0.Add(tc.to)); got != tc.want {
			t.Errorf("during(%v, %v) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	var empty series
	if got := empty.during(t0, t0.Add(time.Second)); got != 0 {
		t.Errorf("empty series: during = %v, want 0", got)
	}
}

func TestReadReportAndVmHWM(t *testing.T) {
	dir := t.TempDir()
	reportPath := filepath.Join(dir, "r.jsonl")
	if got, err := report.ReadReport(reportPath); err != nil || len(got) != 0 {
		t.Fatalf("missing report: %v, %v; want none, nil", got, err)
	}
	// The second line is still being written: it is not read yet.
	if err := os.WriteFile(reportPath, []byte(`{"epoch":3,"seconds":1.5,"bytes_received":42}`+"\n"+`{"epoch":4,"sec`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := report.ReadReport(reportPath)
	if err != nil || len(got) != 1 || got[0].Epoch != 3 || got[0].Seconds != 1.5 || got[0].BytesReceived != 42 {
		t.Fatalf("readReport = %+v, %v; want epoch 3 only", got, err)
	}

	status := filepath.Join(dir, "status")
	if err := os.WriteFile(status, []byte("Name:\tx\nVmPeak:\t  9000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t1024 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := vmHWM(status); got != 2048<<10 {
		t.Errorf("vmHWM = %d, want %d", got, 2048<<10)
	}
	if got := vmHWM(filepath.Join(dir, "none")); got != 0 {
		t.Errorf("vmHWM of a missing file = %d, want 0", got)
	}
	if got := vmHWM("/proc/self/status"); got <= 0 {
		t.Errorf("vmHWM(/proc/self/status) = %d, want > 0", got)
	}
}
