package explain

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
)

// twoSamples and cutPair are package policy's hand-made instances of the
// same names (handmade_test.go, cut_test.go).
func twoSamples() (*profiler.Profile, policy.Resources) {
	p := &profiler.Profile{
		Ops: []string{"decode", "random_resized_crop"},
		Samples: []profiler.SampleProfile{
			{ID: 0, Raw: 1000, Bytes: []int64{1000, 4000, 100}, OpNS: []int64{1e9, 1e9}},
			{ID: 1, Raw: 200, Bytes: []int64{200, 800, 100}, OpNS: []int64{0.5e9, 1e9}},
		},
	}
	return p, policy.Resources{LinkBytesPerSec: 100, StorageCores: 1, ComputeCores: 1}
}

func cutPair() (*profiler.Profile, policy.Resources) {
	p := &profiler.Profile{
		Ops: []string{"decode", "random_resized_crop", "random_horizontal_flip"},
		Samples: []profiler.SampleProfile{
			{ID: 0, Raw: 1000, Bytes: []int64{1000, 5000, 300, 300}, OpNS: []int64{4e8, 2e8, 1e8},
				CutBytes: 200, CutNS: 5e7, CutFinishNS: 3e8},
			{ID: 1, Raw: 500, Bytes: []int64{500, 3000, 300, 300}, OpNS: []int64{2e8, 2e8, 1e8}},
		},
	}
	return p, policy.Resources{LinkBytesPerSec: 100, StorageCores: 1, ComputeCores: 1}
}

func TestExplain(t *testing.T) {
	p, r := twoSamples()
	var buf bytes.Buffer
	if err := Single(&buf, p, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, s := range []string{"nooff", "alloff", "resizeoff", "fastflow", "sophon", "optimal", "bound", "2.600", "storage-cpu",
		"cut", "samples per split", "1 decode, 2 random_resized_crop"} {
		if !strings.Contains(out, s) {
			t.Errorf("explain output lacks %q:\n%s", s, out)
		}
	}
	// With the cut, optimal's row says one sample is cut, and the
	// histogram puts it there.
	pc, rc := cutPair()
	buf.Reset()
	if err := Single(&buf, pc, rc); err != nil {
		t.Fatal(err)
	}
	var optRows []string
	for _, line := range strings.Split(buf.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == policy.NameOptimal {
			optRows = append(optRows, strings.Join(f, " "))
		}
	}
	if want := []string{"optimal 5.000 0.0 0.5 0.5 link 1", "optimal 1 0 0 1 0"}; !slices.Equal(optRows, want) {
		t.Errorf("optimal's rows: got %q, want %q\n%s", optRows, want, buf.String())
	}
}

// The split after encode_jpeg is named in the samples-per-split table,
// and the bound says when the GPU is what binds.
func TestExplainEncodedSplit(t *testing.T) {
	p := &profiler.Profile{
		Ops: []string{"decode", "random_resized_crop", "encode_jpeg", "decode"},
		Samples: []profiler.SampleProfile{
			{ID: 0, Raw: 1000, Bytes: []int64{1000, 5000, 300, 50, 300}, OpNS: []int64{4e8, 2e8, 1e8, 1e8}},
			{ID: 1, Raw: 800, Bytes: []int64{800, 4000, 300, 60, 300}, OpNS: []int64{3e8, 2e8, 1e8, 1e8}},
		},
	}
	r := policy.Resources{LinkBytesPerSec: 100, StorageCores: 4, ComputeCores: 1, GPUSamplesPerSec: 1}
	var buf bytes.Buffer
	if err := Single(&buf, p, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, s := range []string{"3 (after encode_jpeg)", "the GPU's own (2 samples at 1/s)"} {
		if !strings.Contains(out, s) {
			t.Errorf("explain output lacks %q:\n%s", s, out)
		}
	}
	r.GPUSamplesPerSec = 100
	buf.Reset()
	if err := Single(&buf, p, r); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "binding resources (dual weights): storage-egress") {
		t.Errorf("explain output does not say the link binds:\n%s", out)
	}
}
