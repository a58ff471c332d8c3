package ops_test

import (
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

// TestCropSplit: every preset's crop split is just after its first crop
// op, by the op's type.
func TestCropSplit(t *testing.T) {
	for _, name := range []string{"imagenet-train", "imagenet-val"} {
		p, err := ops.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		k, ok := p.CropSplit()
		if !ok || k < 1 || k > p.Len() {
			t.Fatalf("%s: crop split %d %v", name, k, ok)
		}
		switch p.Op(k - 1).(type) {
		case ops.RandomResizedCrop, ops.DecodeRandomResizedCrop, ops.CenterCrop:
		default:
			t.Errorf("%s: op %d before split %d is %s, not a crop", name, k-1, k, p.Op(k-1).Name())
		}
		for j := range k - 1 {
			switch p.Op(j).(type) {
			case ops.RandomResizedCrop, ops.DecodeRandomResizedCrop, ops.CenterCrop:
				t.Errorf("%s: an earlier crop at op %d", name, j)
			}
		}
	}
}

// TestCacheSplit: a pipeline with a random op is cached as its file, a
// deterministic one as its finished output.
func TestCacheSplit(t *testing.T) {
	for name, want := range map[string]int{"imagenet-train": 0, "imagenet-train-fast": 0, "imagenet-val": 5} {
		p, err := ops.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.CacheSplit(); got != want {
			t.Errorf("%s: cache split %d, want %d", name, got, want)
		}
	}
}
