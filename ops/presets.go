package ops

import (
	"fmt"
	"sort"

	"github.com/sophon-dl/sophon/ops/jpeg"
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
	// imagenet-train-q95 and -q90: imagenet-train whose crop goes through
	// a baseline JPEG at quality 95 or 90 before ToTensor, on whichever
	// node: a split just after encode_jpeg sends the crop's JPEG, 5-18x
	// smaller than a raw photograph. Chroma at full resolution (4:4:4): on
	// photographs 4:2:0 saves a quarter of the bytes but loses about 3 dB,
	// and q90 at 4:4:4 is both smaller and closer to the crop than q95 at
	// 4:2:0 (docs/training.md, "Compressed pipelines").
	"imagenet-train-q95": compressedTrain("imagenet-train-q95", 95),
	"imagenet-train-q90": compressedTrain("imagenet-train-q90", 90),
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

// compressedTrain is imagenet-train with encode_jpeg(quality) and a decode
// after the flip.
func compressedTrain(name string, quality int) Spec {
	return Spec{Name: name, Ops: []OpSpec{
		{Op: "decode"},
		{Op: "random_resized_crop", Size: crop224, Scale: rrcScale, Ratio: rrcRatio},
		{Op: "random_horizontal_flip", P: f64(0.5)},
		{Op: "encode_jpeg", Quality: quality, Subsampling: compressedSubsampling()},
		{Op: "decode"},
		{Op: "to_tensor"},
		{Op: "normalize", Mean: imagenetMean, Std: imagenetStd},
	}}
}

// compressedSubsampling is the compressed presets' chroma subsampling:
// 4:4:4 where the encoder writes it (libjpeg-turbo), 4:2:0 in the cgo-free
// build, whose image/jpeg writes nothing else (its pipelines have their
// own IDs: Spec.Build adds the codec's name).
func compressedSubsampling() string {
	if jpeg.Writes444 {
		return "4:4:4"
	}
	return "4:2:0"
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
