package profiler

import (
	"math"
	"strings"
	"testing"
)

func TestStage1(t *testing.T) {
	const n = 10000
	base := Rates{Samples: n, MeanRawBytes: 110e3}
	with := func(link, compute, gpu, storage float64) Rates {
		r := base
		r.LinkBytesPerSec, r.ComputeSamplesPerSec, r.GPUSamplesPerSec, r.StorageSamplesPerSec = link, compute, gpu, storage
		return r
	}
	for _, tc := range []struct {
		name       string
		r          Rates
		force      bool
		want       string
		wantSecs   float64
		wantStage2 bool
	}{
		// 500 Mbit/s: 62.5 MB/s -> 1.1e9 B / 62.5e6 = 17.6 s.
		{"link", with(62.5e6, 2000, 1500, 300), false, BottleneckLink, 17.6, true},
		{"compute", with(1e9, 400, 1500, 300), false, BottleneckComputeCPU, 25, false},
		{"gpu", with(1e9, 2000, 500, 300), false, BottleneckGPU, 20, false},
		{"gpu forced", with(1e9, 2000, 500, 300), true, BottleneckGPU, 20, true},
		{"link ties gpu", with(110e6, 2000, 1000, 0), false, BottleneckGPU, 10, false},
		{"compute ties gpu", with(1e9, 1000, 1000, 0), false, BottleneckGPU, 10, false},
		{"gpu unmeasured", with(62.5e6, 2000, 0, 0), false, BottleneckLink, 17.6, true},
		{"only compute", with(0, 1000, 0, 0), false, BottleneckComputeCPU, 10, false},
		{"nothing measured", with(0, 0, 0, 300), false, BottleneckNone, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Decision
			if tc.force {
				d = Stage1(tc.r, Force())
			} else {
				d = Stage1(tc.r)
			}
			if d.Bottleneck != tc.want || math.Abs(d.PredictedNoOffSeconds-tc.wantSecs) > 1e-9 || d.RunStage2 != tc.wantStage2 {
				t.Errorf("got %s %.3f s stage2=%v, want %s %.3f s stage2=%v", d.Bottleneck, d.PredictedNoOffSeconds, d.RunStage2, tc.want, tc.wantSecs, tc.wantStage2)
			}
			if d.Forced != (tc.force && tc.want != BottleneckLink) || d.Reason == "" {
				t.Errorf("got forced=%v reason %q", d.Forced, d.Reason)
			}
			if tc.r.StorageSamplesPerSec > 0 && math.Abs(d.Seconds.Storage-n/tc.r.StorageSamplesPerSec) > 1e-9 {
				t.Errorf("got storage %v s, want %v", d.Seconds.Storage, n/tc.r.StorageSamplesPerSec)
			}
		})
	}
}

func TestDecisionString(t *testing.T) {
	d := Stage1(Rates{Samples: 1000, MeanRawBytes: 1e5, LinkBytesPerSec: 5e6, ComputeSamplesPerSec: 800, GPUSamplesPerSec: 0, StorageSamplesPerSec: 200})
	s := d.String()
	for _, want := range []string{"link", "5.0 MB/s", "20.00 s", "compute", "800.0", "gpu      not measured", "storage", "not used under No-Off", "bottleneck link", "run stage 2"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
}
