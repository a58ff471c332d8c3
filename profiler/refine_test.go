package profiler

import (
	"reflect"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

// TestRefine: each observed sample takes what was measured of it (the
// payload at its split, ops[0:k] summing to the storage CPU and ops[k:n]
// to the local CPU, in their estimated proportions; the cut's size and
// costs); a field measured on some samples is scaled on the others by the
// measured-to-estimated ratio; the input is not changed and the result is
// valid.
func TestRefine(t *testing.T) {
	est := &Profile{Version: ProfileVersion, Fingerprint: "f", Pipeline: "p", Ops: []string{"decode", "rrc", "norm"}, Samples: []SampleProfile{
		{ID: 0, Raw: 1000, Bytes: []int64{1000, 9000, 300, 1200}, OpNS: []int64{100, 50, 10}, CutBytes: 400, CutNS: 20, CutFinishNS: 30},
		{ID: 1, Raw: 1000, Bytes: []int64{1000, 9000, 300, 1200}, OpNS: []int64{100, 50, 10}, CutBytes: 400, CutNS: 20, CutFinishNS: 30},
		{ID: 2, Raw: 2000, Bytes: []int64{2000, 18000, 300, 1200}, OpNS: []int64{200, 100, 10}, CutBytes: 800, CutNS: 40, CutFinishNS: 60},
		{ID: 3, Raw: 500, Bytes: []int64{500, 4500, 300, 1200}, OpNS: []int64{50, 25, 10}},
	}}
	orig := est.Samples[0].clone()
	got, st := Refine(est, []Observation{
		// Sample 0 cut: 600 bytes, 30 ns there, 70 ns here (finish + norm).
		{ID: 0, Split: ops.SplitCut, Payload: 600, StorageNS: 30, LocalNS: 70},
		// Sample 1 raw: all ops here, 320 ns.
		{ID: 1, Split: 0, Payload: 1000, LocalNS: 320},
		// Sample 2 at k = 2: 350 bytes, 600 ns there, 20 here.
		{ID: 2, Split: 2, Payload: 350, StorageNS: 600, LocalNS: 20},
		{ID: 9, Split: 0, Payload: 1, LocalNS: 1}, // unknown: skipped
	})
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(est.Samples[0], orig) {
		t.Errorf("input changed: %+v", est.Samples[0])
	}
	if st.Observed != 3 {
		t.Errorf("observed %d, want 3", st.Observed)
	}
	s0, s1, s2, s3 := got.Samples[0], got.Samples[1], got.Samples[2], got.Samples[3]
	if s0.CutBytes != 600 || s0.CutNS != 30 || s0.CutFinishNS+s0.OpNS[2] != 70 || s0.CutFinishNS != 52 {
		t.Errorf("cut sample: %+v", s0)
	}
	// The cut measured 1.5x its estimated size and cost: the samples not
	// cut (2) scale by that.
	if st.CutBytes != 1.5 || st.CutNS != 1.5 || s2.CutBytes != 1200 || s2.CutNS != 60 {
		t.Errorf("cut ratios %+v; sample 2 cut %d bytes %d ns, want 1200, 60", st, s2.CutBytes, s2.CutNS)
	}
	if want := []int64{200, 100, 20}; !reflect.DeepEqual(s1.OpNS, want) {
		t.Errorf("raw sample ops %v, want %v", s1.OpNS, want)
	}
	if want := []int64{400, 200, 20}; !reflect.DeepEqual(s2.OpNS, want) || s2.Bytes[2] != 350 {
		t.Errorf("split 2 sample ops %v bytes %v, want ops %v and 350 bytes at 2", s2.OpNS, s2.Bytes, want)
	}
	// The raw sample's ops cost 2x their estimate: sample 3, not measured,
	// scales by it, and sample 0's decode and crop (which its cut
	// replaced) too.
	if st.OpNS != 2 || !reflect.DeepEqual(s3.OpNS, []int64{100, 50, 20}) || s0.OpNS[0] != 200 || s0.OpNS[1] != 100 {
		t.Errorf("op ratio %v; unmeasured ops %v, cut sample's %v", st.OpNS, s3.OpNS, s0.OpNS)
	}
}
