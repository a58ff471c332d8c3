package ops

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"

	"gopkg.in/yaml.v3"

	"github.com/sophon-dl/sophon/ops/jpeg"
)

// Spec describes a pipeline: a name and an ordered list of ops. It is read
// from YAML or JSON (JSON is valid YAML):
//
//	name: imagenet-train
//	ops:
//	  - op: decode
//	  - op: random_resized_crop
//	    size: [224, 224]
//	    scale: [0.08, 1.0]
//	    ratio: [0.75, 1.3333333333333333]
//	  - op: random_horizontal_flip
//	    p: 0.5
//	  - op: to_tensor
//	  - op: normalize
//	    mean: [0.485, 0.456, 0.406]
//	    std: [0.229, 0.224, 0.225]
type Spec struct {
	Name string   `json:"name" yaml:"name"`
	Ops  []OpSpec `json:"ops" yaml:"ops"`
}

// OpSpec is one op of a [Spec]. Which fields apply depends on Op; omitted
// fields take torchvision's defaults.
type OpSpec struct {
	// Op is one of decode, random_resized_crop, resize, center_crop,
	// random_horizontal_flip, to_tensor, normalize,
	// decode_random_resized_crop, encode_jpeg.
	Op string `json:"op" yaml:"op"`
	// Size is [h, w]; for resize a single value sets the shorter side.
	Size []int `json:"size,omitempty" yaml:"size,omitempty"`
	// Scale and Ratio are RandomResizedCrop's sampling bounds.
	Scale []float64 `json:"scale,omitempty" yaml:"scale,omitempty"`
	Ratio []float64 `json:"ratio,omitempty" yaml:"ratio,omitempty"`
	// P is the flip probability. Nil means 0.5.
	P *float64 `json:"p,omitempty" yaml:"p,omitempty"`
	// Mean and Std are Normalize's per-channel statistics.
	Mean []float64 `json:"mean,omitempty" yaml:"mean,omitempty"`
	Std  []float64 `json:"std,omitempty" yaml:"std,omitempty"`
	// Quality is encode_jpeg's quality factor, 1-100 (libjpeg's, as
	// Pillow's and torchvision's). Zero means 75, their default.
	Quality int `json:"quality,omitempty" yaml:"quality,omitempty"`
	// Subsampling is encode_jpeg's chroma subsampling: "4:2:0" (the
	// default, Pillow's and torchvision's) or "4:4:4".
	Subsampling string `json:"subsampling,omitempty" yaml:"subsampling,omitempty"`
	// MaxPixels bounds decoded images. Zero means DefaultMaxPixels. Under
	// Pipeline.RunLimited the server's Limits.MaxPixels caps it: a spec can
	// lower the server's limit, never raise it.
	MaxPixels int `json:"max_pixels,omitempty" yaml:"max_pixels,omitempty"`
}

func (s Spec) clone() Spec {
	c := Spec{Name: s.Name, Ops: make([]OpSpec, len(s.Ops))}
	for i, o := range s.Ops {
		o.Size = slices.Clone(o.Size)
		o.Scale = slices.Clone(o.Scale)
		o.Ratio = slices.Clone(o.Ratio)
		o.Mean = slices.Clone(o.Mean)
		o.Std = slices.Clone(o.Std)
		if o.P != nil {
			p := *o.P
			o.P = &p
		}
		c.Ops[i] = o
	}
	return c
}

// ParseSpec reads a spec from YAML or JSON. Unknown fields are errors.
func ParseSpec(b []byte) (Spec, error) {
	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return Spec{}, wrapf(ErrSpec, "empty spec")
		}
		return Spec{}, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	return s, nil
}

// LoadPipeline builds a preset by name or reads a spec file (YAML or JSON).
func LoadPipeline(nameOrPath string) (*Pipeline, error) {
	if _, ok := presets[nameOrPath]; ok {
		return Preset(nameOrPath)
	}
	b, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is neither a preset (%v) nor a readable file: %v", ErrSpec, nameOrPath, PresetNames(), err)
	}
	s, err := ParseSpec(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", nameOrPath, err)
	}
	return s.Build()
}

// Build validates the spec, fills in defaults and returns the pipeline.
// The first op must take encoded bytes and each op must take what the
// previous one produces.
func (s Spec) Build() (*Pipeline, error) {
	if s.Name == "" {
		return nil, wrapf(ErrSpec, "missing name")
	}
	if len(s.Ops) == 0 {
		return nil, wrapf(ErrSpec, "%s: no ops", s.Name)
	}
	canon := Spec{Name: s.Name, Ops: make([]OpSpec, len(s.Ops))}
	ops := make([]Op, len(s.Ops))
	prev := KindEncoded
	for i, o := range s.Ops {
		op, c, err := buildOp(o)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: op %d (%s): %v", ErrSpec, s.Name, i, o.Op, err)
		}
		if op.In() != prev {
			return nil, wrapf(ErrSpec, "%s: op %d (%s) takes %s but receives %s", s.Name, i, o.Op, op.In(), prev)
		}
		prev = op.Out()
		ops[i], canon.Ops[i] = op, c
	}
	b, err := json.Marshal(canon)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if JPEGBackend != "libjpeg-turbo" {
		// Another codec decodes and encodes other pixels: its pipelines
		// are other pipelines, so that its agents never pair with
		// libjpeg-turbo's (a sample would differ with the node that ran
		// it).
		b = append(b, JPEGBackend...)
	}
	sum := sha256.Sum256(b)
	return newPipeline(canon, s.Name+"@"+hex.EncodeToString(sum[:6]), ops), nil
}

// buildOp returns the op and its canonical spec (every default explicit).
func buildOp(s OpSpec) (Op, OpSpec, error) {
	c := OpSpec{Op: s.Op}
	limits := func() (DecodeLimits, error) {
		if s.MaxPixels < 0 {
			return DecodeLimits{}, fmt.Errorf("max_pixels %d is negative", s.MaxPixels)
		}
		c.MaxPixels = s.MaxPixels
		return DecodeLimits{MaxPixels: s.MaxPixels}, nil
	}
	size := func() (int, int, error) {
		if len(s.Size) == 1 {
			c.Size = []int{s.Size[0], s.Size[0]}
			return positive2(s.Size[0], s.Size[0])
		}
		if len(s.Size) != 2 {
			return 0, 0, fmt.Errorf("size needs [h, w], got %v", s.Size)
		}
		c.Size = []int{s.Size[0], s.Size[1]}
		return positive2(s.Size[0], s.Size[1])
	}
	rrc := func() (RRCParams, error) {
		p := DefaultRRCParams
		if s.Scale != nil {
			if len(s.Scale) != 2 || !(s.Scale[0] > 0 && s.Scale[0] <= s.Scale[1] && s.Scale[1] <= 1) {
				return p, fmt.Errorf("scale needs [lo, hi] with 0 < lo <= hi <= 1, got %v", s.Scale)
			}
			p.Scale = [2]float64{s.Scale[0], s.Scale[1]}
		}
		if s.Ratio != nil {
			if len(s.Ratio) != 2 || !(s.Ratio[0] > 0 && s.Ratio[0] <= s.Ratio[1]) {
				return p, fmt.Errorf("ratio needs [lo, hi] with 0 < lo <= hi, got %v", s.Ratio)
			}
			p.Ratio = [2]float64{s.Ratio[0], s.Ratio[1]}
		}
		c.Scale, c.Ratio = p.Scale[:], p.Ratio[:]
		return p, nil
	}
	unused := func(names ...string) error {
		set := map[string]bool{
			"size": s.Size != nil, "scale": s.Scale != nil, "ratio": s.Ratio != nil, "p": s.P != nil,
			"mean": s.Mean != nil, "std": s.Std != nil, "max_pixels": s.MaxPixels != 0,
			"quality": s.Quality != 0, "subsampling": s.Subsampling != "",
		}
		for _, n := range names {
			delete(set, n)
		}
		var bad []string
		for n, isSet := range set {
			if isSet {
				bad = append(bad, n)
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			return fmt.Errorf("%s takes no %v", s.Op, bad)
		}
		return nil
	}
	switch s.Op {
	case "decode":
		if err := unused("max_pixels"); err != nil {
			return nil, c, err
		}
		lim, err := limits()
		return Decode{Limits: lim}, c, err
	case "random_resized_crop", "decode_random_resized_crop":
		if err := unused("size", "scale", "ratio", "max_pixels"); err != nil {
			return nil, c, err
		}
		h, w, err := size()
		if err != nil {
			return nil, c, err
		}
		p, err := rrc()
		if err != nil {
			return nil, c, err
		}
		if s.Op == "random_resized_crop" {
			if s.MaxPixels != 0 {
				return nil, c, fmt.Errorf("random_resized_crop takes no max_pixels")
			}
			return RandomResizedCrop{H: h, W: w, Params: p}, c, nil
		}
		lim, err := limits()
		return DecodeRandomResizedCrop{H: h, W: w, Params: p, Limits: lim}, c, err
	case "resize":
		if err := unused("size"); err != nil {
			return nil, c, err
		}
		if len(s.Size) == 1 {
			if s.Size[0] < 1 {
				return nil, c, fmt.Errorf("size %v must be positive", s.Size)
			}
			c.Size = []int{s.Size[0]}
			return Resize{Short: s.Size[0]}, c, nil
		}
		h, w, err := size()
		return Resize{H: h, W: w}, c, err
	case "center_crop":
		if err := unused("size"); err != nil {
			return nil, c, err
		}
		h, w, err := size()
		return CenterCrop{H: h, W: w}, c, err
	case "random_horizontal_flip":
		if err := unused("p"); err != nil {
			return nil, c, err
		}
		p := 0.5
		if s.P != nil {
			p = *s.P
		}
		if !(p >= 0 && p <= 1) {
			return nil, c, fmt.Errorf("p %v must be in [0, 1]", p)
		}
		c.P = &p
		return RandomHorizontalFlip{P: p}, c, nil
	case "encode_jpeg":
		if err := unused("quality", "subsampling"); err != nil {
			return nil, c, err
		}
		c.Quality = cmp.Or(s.Quality, 75)
		if c.Quality < 1 || c.Quality > 100 {
			return nil, c, fmt.Errorf("quality %d must be in [1, 100]", s.Quality)
		}
		c.Subsampling = cmp.Or(s.Subsampling, "4:2:0")
		sub, ok := subsamplings[c.Subsampling]
		if !ok {
			return nil, c, fmt.Errorf("subsampling %q must be 4:2:0 or 4:4:4", s.Subsampling)
		}
		if sub == 444 && !jpeg.Writes444 {
			return nil, c, fmt.Errorf("subsampling 4:4:4: this build's encoder (%s, built without cgo) writes only 4:2:0; build with cgo for libjpeg-turbo, or write the spec with subsampling \"4:2:0\" (testbed/scripts/imagenet-train-q95-420.yaml)", jpeg.Backend)
		}
		return Encode{Quality: c.Quality, Subsampling: sub}, c, nil
	case "to_tensor":
		return ToTensor{}, c, unused()
	case "normalize":
		if err := unused("mean", "std"); err != nil {
			return nil, c, err
		}
		if len(s.Mean) != Channels || len(s.Std) != Channels {
			return nil, c, fmt.Errorf("mean and std need %d values each, got %v and %v", Channels, s.Mean, s.Std)
		}
		var n Normalize
		for i := range Channels {
			if !(s.Std[i] > 0) {
				return nil, c, fmt.Errorf("std %v must be positive", s.Std)
			}
			n.Mean[i], n.Std[i] = float32(s.Mean[i]), float32(s.Std[i])
		}
		c.Mean, c.Std = slices.Clone(s.Mean), slices.Clone(s.Std)
		return n, c, nil
	}
	return nil, c, fmt.Errorf("unknown op %q (known: %v)", s.Op, OpNames())
}

func positive2(h, w int) (int, int, error) {
	if h < 1 || w < 1 || h > 1<<15 || w > 1<<15 {
		return 0, 0, fmt.Errorf("size [%d, %d] must be in [1, 32768]", h, w)
	}
	return h, w, nil
}

// subsamplings are encode_jpeg's subsampling names and Encode's values.
var subsamplings = map[string]int{"4:2:0": 420, "4:4:4": 444}

// OpNames lists the op names a spec may use.
func OpNames() []string {
	return []string{"decode", "random_resized_crop", "resize", "center_crop",
		"random_horizontal_flip", "to_tensor", "normalize", "decode_random_resized_crop", "encode_jpeg"}
}
