package ops

import (
	"fmt"
	"sort"
)

func f64(v float64) *float64 { return &v }

var (
	imagenetMean = []float64{0.485, 0.456, 0.406}
	imagenetStd  = []float64{0.229, 0.224, 0.225}
	crop224      = []int{224, 224}
	rrcScale     = []float64{0.08, 1}
	rrcRatio     = []float64{3.0 / 4, 4.0 / 3}
)

// presets are the built-in pipelines, named as torchvision's ImageNet
// reference recipes.
var presets = map[string]Spec{
	// imagenet-train: RandomResizedCrop(224), RandomHorizontalFlip(),
	// ToTensor(), Normalize(ImageNet).
	"imagenet-train": {Name: "imagenet-train", Ops: []OpSpec{
		{Op: "decode"},
		{Op: "random_resized_crop", Size: crop224, Scale: rrcScale, Ratio: rrcRatio},
		{Op: "random_horizontal_flip", P: f64(0.5)},
		{Op: "to_tensor"},
		{Op: "normalize", Mean: imagenetMean, Std: imagenetStd},
	}},
	// imagenet-val: Resize(256), CenterCrop(224), ToTensor(),
	// Normalize(ImageNet).
	"imagenet-val": {Name: "imagenet-val", Ops: []OpSpec{
		{Op: "decode"},
		{Op: "resize", Size: []int{256}},
		{Op: "center_crop", Size: crop224},
		{Op: "to_tensor"},
		{Op: "normalize", Mean: imagenetMean, Std: imagenetStd},
	}},
	// imagenet-train-fast: imagenet-train with decode and crop fused into
	// one op that decodes only the crop, at reduced DCT scale when the crop
	// shrinks 2x or more.
	"imagenet-train-fast": {Name: "imagenet-train-fast", Ops: []OpSpec{
		{Op: "decode_random_resized_crop", Size: crop224, Scale: rrcScale, Ratio: rrcRatio},
		{Op: "random_horizontal_flip", P: f64(0.5)},
		{Op: "to_tensor"},
		{Op: "normalize", Mean: imagenetMean, Std: imagenetStd},
	}},
}

// PresetNames lists the built-in pipelines.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset builds a built-in pipeline by name.
func Preset(name string) (*Pipeline, error) {
	s, ok := presets[name]
	if !ok {
		return nil, fmt.Errorf("%w: unknown preset %q (known: %v)", ErrSpec, name, PresetNames())
	}
	return s.clone().Build()
}
