package ops

import (
	"testing"
	"time"
)

func TestLimitsDecode(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		lim  Limits
		own  DecodeLimits
		want DecodeLimits
	}{
		{"zero keeps the op's", Limits{}, DecodeLimits{MaxPixels: 5, MaxScans: 3}, DecodeLimits{MaxPixels: 5, MaxScans: 3}},
		{"server lowers the default", Limits{MaxPixels: 100}, DecodeLimits{}, DecodeLimits{MaxPixels: 100}},
		{"spec cannot raise", Limits{MaxPixels: 100}, DecodeLimits{MaxPixels: 1000}, DecodeLimits{MaxPixels: 100}},
		{"spec can lower", Limits{MaxPixels: 100}, DecodeLimits{MaxPixels: 10}, DecodeLimits{MaxPixels: 10}},
		{"above the default changes nothing", Limits{MaxPixels: 1 << 40}, DecodeLimits{}, DecodeLimits{}},
		{"smaller of each", Limits{MaxScans: 64, MaxMemory: 1 << 20, MaxOutputBytes: 7, Deadline: t0},
			DecodeLimits{MaxScans: 8, MaxMemory: 1 << 30, Deadline: t0.Add(time.Second)},
			DecodeLimits{MaxScans: 8, MaxMemory: 1 << 20, maxBytes: 7, Deadline: t0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.lim.decode(c.own); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"}, {999, "999 bytes"}, {1024, "1 KiB"}, {128 << 20, "128 MiB"}, {3 << 30, "3 GiB"},
		{180000000, "180.0 MB"}, {1500, "1.5 kB"}, {3221225473, "3.2 GB"},
	} {
		if got := formatBytes(c.n); got != c.want {
			t.Errorf("formatBytes(%d): got %q, want %q", c.n, got, c.want)
		}
	}
}

func TestJPEGScansOver(t *testing.T) {
	seg := func(m byte, n int) []byte {
		return append([]byte{0xFF, m, byte((n + 2) >> 8), byte(n + 2)}, make([]byte, n)...)
	}
	scan := func(data ...byte) []byte { return append(seg(0xDA, 8), data...) }
	var file []byte
	file = append(file, 0xFF, 0xD8)
	file = append(file, seg(0xC2, 11)...)
	for range 3 {
		// Entropy data with a stuffed 0xFF, a restart marker and fill bytes.
		file = append(file, scan(1, 0xFF, 0x00, 2, 0xFF, 0xD3, 4, 0xFF)...)
	}
	file = append(file, 0xFF, 0xD9)
	file = append(file, scan()...) // after EOI: not counted
	for max, want := range []bool{true, true, true, false, false} {
		if got := jpegScansOver(file, max); got != want {
			t.Errorf("jpegScansOver(3 scans, %d): got %v, want %v", max, got, want)
		}
	}
}
