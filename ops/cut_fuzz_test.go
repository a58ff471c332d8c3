package ops_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/ops/synth"
)

// FuzzCut feeds arbitrary bytes to Pipeline.Cut as the raw JPEG, under
// DefaultLimits (with a smaller pixel cap, so the fuzzer spends its time on
// structure rather than pixels). Nothing may panic and every error must be
// typed. Where the cut succeeds, the whole run must succeed too, and the run
// from SplitCut must give its bytes or fail as corrupt data (then the compute
// agent fetches the sample raw); where the cut fails other than by
// declining, the whole run must fail the same way.
func FuzzCut(f *testing.F) {
	for i, o := range []ops.TestEncodeOptions{
		{},
		{EncodeOptions: ops.EncodeOptions{Subsampling: 422, Quality: 50}},
		{EncodeOptions: ops.EncodeOptions{Subsampling: 444}},
		{EncodeOptions: ops.EncodeOptions{Gray: true}},
		{EncodeOptions: ops.EncodeOptions{Progressive: true}},
		{EncodeOptions: ops.EncodeOptions{CMYK: true}, YCCK: true},
		{LumaSamp: [2]int{4, 1}, RestartInterval: 2},
		{Arithmetic: true},
	} {
		data, err := ops.EncodeJPEGTest(synth.Photo(uint64(i), 96+8*i, 72), o)
		if err != nil {
			continue // an option this backend cannot write
		}
		f.Add(data)
		f.Add(data[:len(data)*3/4])
		for _, at := range []int{len(data) / 3, len(data) / 2, len(data) - 20} {
			bad := bytes.Clone(data)
			bad[at] ^= 0x20
			f.Add(bad)
		}
	}
	for _, c := range hostile.Corpus() {
		if len(c.Data) < 4096 {
			f.Add(c.Data)
		}
	}
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		f.Fatal(err)
	}
	lim := ops.DefaultLimits()
	lim.MaxPixels = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		key := ops.Key{Seed: 1, Epoch: uint64(len(data) % 5), Sample: 9}
		cut, err := p.Cut(key, ops.Encoded(data), lim)
		if err != nil {
			if cut != nil {
				t.Fatalf("a cut with the error %v", err)
			}
			if cutErrClass(err) == err {
				t.Fatalf("untyped error %v", err)
			}
			if errors.Is(err, ops.ErrCannotCut) {
				return
			}
			if _, runErr := p.RunLimited(key, ops.Encoded(data), 0, p.Len(), lim); cutErrClass(runErr) != cutErrClass(err) {
				t.Fatalf("Cut fails with %v, the whole run with %v", err, runErr)
			}
			return
		}
		got, err := p.RunLimited(key, cut, ops.SplitCut, p.Len(), lim)
		if err != nil {
			// A damaged file can decode whole (libjpeg stops reading at
			// the crop's last row) and still give a cut whose own decode
			// meets the damage: the cut must then fail as corrupt data,
			// which the compute agent answers by fetching the sample
			// again raw (compute-agent/engine, refetchRaw).
			if !errors.Is(err, ops.ErrCorrupt) {
				t.Fatalf("run from the cut: %v, want success or ops.ErrCorrupt", err)
			}
			return
		}
		want, err := p.RunLimited(key, ops.Encoded(data), 0, p.Len(), lim)
		if err != nil {
			t.Fatalf("the cut succeeded, the whole run fails: %v", err)
		}
		if !bytes.Equal(valueBytes(got), valueBytes(want)) {
			t.Fatalf("the run from the cut %dx%d+%d+%d differs from the whole run", cut.W, cut.H, cut.X, cut.Y)
		}
	})
}
