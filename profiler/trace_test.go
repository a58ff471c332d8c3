package profiler

import (
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/ops/wireform"
)

func TestTrace(t *testing.T) {
	p, err := ops.Preset("imagenet-val")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := synth.JPEG(1, 320, 240, synth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Trace(p, ops.Key{Sample: 4}, raw, wireform.CodecZstd)
	if err != nil {
		t.Fatal(err)
	}
	// decode 320x240x3, resize to 341x256x3, crop 224x224x3, tensor x4 twice.
	want := []int{320 * 240 * 3, 341 * 256 * 3, 224 * 224 * 3, 224 * 224 * 3 * 4, 224 * 224 * 3 * 4}
	if tr.Sample != 4 || tr.Raw != len(raw) || len(tr.Ops) != len(want) {
		t.Fatalf("trace %+v", tr)
	}
	for j, c := range tr.Ops {
		if c.Bytes != want[j] {
			t.Errorf("op %d: %d bytes, want %d", j, c.Bytes, want[j])
		}
		if c.Compressed <= 0 || c.Compressed > c.Bytes || c.Dur <= 0 {
			t.Errorf("op %d: compressed %d of %d, dur %v", j, c.Compressed, c.Bytes, c.Dur)
		}
	}
	if _, err := Trace(p, ops.Key{Sample: 9}, []byte("junk"), wireform.CodecNone); err == nil {
		t.Error("trace of junk succeeded")
	}
}

func TestSummarize(t *testing.T) {
	p, _ := ops.Preset("imagenet-train")
	ms := time.Millisecond
	traces := []SampleTrace{
		{Raw: 100, Ops: []OpCost{{Bytes: 1000, Dur: 2 * ms}, {Bytes: 50, Dur: ms}, {Bytes: 50}, {Bytes: 200}, {Bytes: 200}}},
		{Raw: 300, Ops: []OpCost{{Bytes: 3000, Dur: 4 * ms}, {Bytes: 150, Dur: 3 * ms}, {Bytes: 150}, {Bytes: 250}, {Bytes: 600}}},
	}
	s := Summarize(p, traces)
	if len(s) != 6 || s[0].Name != "raw" || s[2].Name != "random_resized_crop" {
		t.Fatalf("summary %+v", s)
	}
	if s[0].MeanBytes != 200 || s[2].MeanBytes != 100 || s[2].Smaller != 1 || s[1].Smaller != 0 || s[4].Smaller != 0.5 {
		t.Errorf("sizes: %+v", s)
	}
	if s[1].MeanOpDur != 3*ms || s[2].MeanOpDur != 2*ms || s[2].MeanPrefixDur != 5*ms {
		t.Errorf("durations: %+v", s)
	}
}
