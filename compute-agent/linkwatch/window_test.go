package linkwatch

import (
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// TestWindowCount: the window count covers the bandwidth-delay bytes in mean
// responses on top of the configured count, within MaxWindowCount and
// what the byte bound holds; without a round trip it is the configured
// count.
func TestWindowCount(t *testing.T) {
	const kb = 1 << 10
	// 500 Mbit/s x 80 ms, twice: 10 MB.
	bdp := int64(2 * 62.5e6 * 0.080)
	tests := []struct {
		name        string
		base        int
		bdp, mean   int64
		windowBytes int64
		want        int
	}{
		{"no round trip", 64, 0, 28 * kb, 64 << 20, 64},
		{"unknown mean", 64, bdp, 0, 64 << 20, 64},
		{"28 KB responses", 64, bdp, 28 * kb, 64 << 20, 64 + 349},
		{"16 KB responses", 64, bdp, 16 * kb, 64 << 20, 64 + 611},
		{"byte bound", 64, bdp, 16 * kb, 4 << 20, 256},
		{"byte bound under the base", 64, bdp, 1 << 20, 16 << 20, 64},
		{"count bound", 64, 1 << 40, 1, 1 << 40, MaxWindowCount},
		{"base above the count bound", MaxWindowCount + 5, bdp, 1, 1 << 40, MaxWindowCount + 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WindowCount(tt.base, tt.bdp, tt.mean, tt.windowBytes); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// TestCountRTT: a deadline shorter than a few round trips gains one and
// is at least FewRTTs of them; a longer one, or an unknown round trip,
// leaves it.
func TestCountRTT(t *testing.T) {
	ms := time.Millisecond
	tests := []struct{ d, rtt, want time.Duration }{
		{2 * time.Second, 0, 2 * time.Second},
		{2 * time.Second, 80 * ms, 2 * time.Second},
		{time.Second, 300 * ms, 1300 * ms},
		{100 * ms, 80 * ms, 320 * ms},
		{time.Second, time.Second, 4 * time.Second},
	}
	for _, tt := range tests {
		if got := CountRTT(tt.d, tt.rtt); got != tt.want {
			t.Errorf("CountRTT(%v, %v) = %v, want %v", tt.d, tt.rtt, got, tt.want)
		}
	}
}

// TestTotal: the epoch's link is its agents' together.
func TestTotal(t *testing.T) {
	if Total([]*report.Link{nil, {}}) != nil {
		t.Error("a link with no readings")
	}
	got := Total([]*report.Link{
		{RTTSeconds: 0.08, MinRTTSeconds: 0.079, RTTFrom: "storage_tcp_info", Retransmits: 1, SegmentsOut: 1000, LossKnown: true,
			InFlightMeanBytes: 100, InFlightPeakBytes: 200, WindowCount: 300, WindowBytes: 1 << 20, WindowPeakBytes: 5, Readings: 4},
		{RTTSeconds: 0.1, MinRTTSeconds: 0.09, RTTFrom: "storage_tcp_info", Retransmits: 3, SegmentsOut: 1000, LossKnown: true,
			InFlightMeanBytes: 10, InFlightPeakBytes: 20, WindowCount: 30, WindowBytes: 1 << 20, WindowPeakBytes: 5, Readings: 4},
	})
	want := report.Link{RTTSeconds: 0.09, MinRTTSeconds: 0.079, RTTFrom: "storage_tcp_info", Retransmits: 4, SegmentsOut: 2000, Loss: 0.002, LossKnown: true,
		InFlightMeanBytes: 110, InFlightPeakBytes: 220, WindowCount: 330, WindowBytes: 2 << 20, WindowPeakBytes: 10, Readings: 8}
	if got == nil || *got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
