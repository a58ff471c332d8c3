package ops_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

func TestPresetsBuild(t *testing.T) {
	for _, name := range ops.PresetNames() {
		p, err := ops.Preset(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Name() != name || !strings.HasPrefix(p.ID(), name+"@") {
			t.Errorf("%s: name %q id %q", name, p.Name(), p.ID())
		}
		if got := p.KindAt(p.Len()); got != ops.KindTensor {
			t.Errorf("%s: output kind %v, want tensor", name, got)
		}
		// The canonical spec rebuilds to the same pipeline.
		again, err := p.Spec().Build()
		if err != nil || again.ID() != p.ID() {
			t.Errorf("%s: canonical spec rebuilds to %v, %v", name, again, err)
		}
	}
	if _, err := ops.Preset("nope"); !errors.Is(err, ops.ErrSpec) {
		t.Errorf("unknown preset: got %v, want ErrSpec", err)
	}
}

func TestParseSpec(t *testing.T) {
	yamlSpec := `
name: mine
ops:
  - op: decode
  - op: random_resized_crop
    size: [160, 128]
    scale: [0.25, 1]
  - op: random_horizontal_flip
    p: 0.25
  - op: to_tensor
`
	jsonSpec := `{"name": "mine", "ops": [{"op": "decode"}, {"op": "random_resized_crop", "size": [160, 128], "scale": [0.25, 1]},
	  {"op": "random_horizontal_flip", "p": 0.25}, {"op": "to_tensor"}]}`
	var ids []string
	for _, src := range []string{yamlSpec, jsonSpec} {
		s, err := ops.ParseSpec([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Build()
		if err != nil {
			t.Fatal(err)
		}
		rrc, ok := p.Op(1).(ops.RandomResizedCrop)
		if !ok || rrc.H != 160 || rrc.W != 128 || rrc.Params.Scale != [2]float64{0.25, 1} || rrc.Params.Ratio != ops.DefaultRRCParams.Ratio {
			t.Errorf("op 1 = %#v", p.Op(1))
		}
		if f := p.Op(2).(ops.RandomHorizontalFlip); f.P != 0.25 {
			t.Errorf("flip p = %v, want 0.25", f.P)
		}
		ids = append(ids, p.ID())
	}
	if ids[0] != ids[1] {
		t.Errorf("YAML and JSON of the same spec give ids %q and %q", ids[0], ids[1])
	}
	// Changing one parameter changes the id.
	s, _ := ops.ParseSpec([]byte(strings.Replace(yamlSpec, "p: 0.25", "p: 0.5", 1)))
	p, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	if p.ID() == ids[0] {
		t.Errorf("different flip p, same id %q", p.ID())
	}
}

func TestBadSpecs(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"empty", ``, "empty spec"},
		{"unknown field", "name: x\nops:\n  - op: decode\n    colour: red\n", "colour"},
		{"unknown op", "name: x\nops:\n  - op: decode\n  - op: blur\n", `unknown op "blur"`},
		{"no name", "ops:\n  - op: decode\n", "missing name"},
		{"no ops", "name: x\n", "no ops"},
		{"kind chain", "name: x\nops:\n  - op: decode\n  - op: normalize\n    mean: [0,0,0]\n    std: [1,1,1]\n", "takes tensor but receives image"},
		{"first op", "name: x\nops:\n  - op: to_tensor\n", "takes image but receives encoded"},
		{"bad scale", "name: x\nops:\n  - op: decode\n  - op: random_resized_crop\n    size: [8, 8]\n    scale: [0.5, 0.1]\n", "scale"},
		{"bad p", "name: x\nops:\n  - op: decode\n  - op: random_horizontal_flip\n    p: 1.5\n", "p 1.5"},
		{"bad std", "name: x\nops:\n  - op: decode\n  - op: to_tensor\n  - op: normalize\n    mean: [0,0,0]\n    std: [1,0,1]\n", "std"},
		{"stray param", "name: x\nops:\n  - op: decode\n  - op: to_tensor\n    p: 0.5\n", "takes no [p]"},
		{"bad size", "name: x\nops:\n  - op: decode\n  - op: center_crop\n    size: [0, 4]\n", "size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ops.ParseSpec([]byte(tc.src))
			if err == nil {
				_, err = s.Build()
			}
			if !errors.Is(err, ops.ErrSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrSpec mentioning %q", err, tc.want)
			}
		})
	}
}
