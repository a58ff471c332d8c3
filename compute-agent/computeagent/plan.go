package computeagent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/sophon-dl/sophon/ops"
)

// Plan maps each sample to its split k: the storage agent runs ops[0:k] and
// this agent runs ops[k:n]. k may also be ops.SplitCut (-1), the
// JPEG-domain crop, for pipelines that have it (ops.Pipeline.CanCut): the
// storage agent cuts the JPEG to the crop box and this agent runs every op
// from the cut. A plan is pure data; New checks every split it can name
// against the pipeline.
type Plan interface {
	// Name identifies the plan in reports, e.g. "nooff" or a file's name.
	Name() string
	// Split is sample's split k, in [0, n], or ops.SplitCut.
	Split(sample uint64) int
}

// staticPlan gives every sample the same split.
type staticPlan struct {
	name string
	k    int
}

func (p staticPlan) Name() string         { return p.name }
func (p staticPlan) Split(uint64) int     { return p.k }
func (p staticPlan) splits() (int, []int) { return p.k, nil }

// NoOff fetches raw bytes for every sample (k = 0).
func NoOff() Plan { return staticPlan{name: "nooff", k: 0} }

// AllOff runs the whole pipeline on the storage agent (k = n).
func AllOff(p *ops.Pipeline) Plan { return staticPlan{name: "alloff", k: p.Len()} }

// ResizeOff splits right after the pipeline's first crop op
// (random_resized_crop, decode_random_resized_crop or center_crop).
func ResizeOff(p *ops.Pipeline) (Plan, error) {
	k, ok := p.CropSplit()
	if !ok {
		return nil, configErr("resizeoff: pipeline %s has no crop op", p.ID())
	}
	return staticPlan{name: "resizeoff", k: k}, nil
}

// PlanFile is a per-sample plan, stored as JSON:
//
//	{
//	  "pipeline": "imagenet-train@1f8b59f902fd",  // ops.Pipeline.ID(); empty: any
//	  "default": 0,                               // k for samples not listed
//	  "splits": {"17": 2, "42": 5, "43": -1}      // sample id (decimal) -> k
//	}
//
// Every k must lie in [0, n] for the pipeline's n ops, or be -1
// (ops.SplitCut) where the pipeline has the JPEG-domain crop.
type PlanFile struct {
	// PlanName is the plan's name in reports; not stored.
	PlanName string `json:"-"`
	Pipeline string `json:"pipeline"`
	Default  int    `json:"default"`
	// Splits maps a sample id to its split.
	Splits map[uint64]int `json:"splits"`
}

// Name implements [Plan].
func (f *PlanFile) Name() string { return f.PlanName }

// Split implements [Plan].
func (f *PlanFile) Split(sample uint64) int {
	if k, ok := f.Splits[sample]; ok {
		return k
	}
	return f.Default
}

func (f *PlanFile) splits() (int, []int) {
	ks := make([]int, 0, len(f.Splits))
	for _, k := range f.Splits {
		ks = append(ks, k)
	}
	return f.Default, ks
}

// ReadPlanFile reads a per-sample plan file (see [PlanFile]).
func ReadPlanFile(path string) (*PlanFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, configErr("plan: %v", err)
	}
	return DecodePlanFile(b, path)
}

// maxPlanFile bounds a plan file's size (about 30 bytes per listed sample).
const maxPlanFile = 1 << 30

// DecodePlanFile parses a per-sample plan named name from its JSON (see
// [PlanFile]). Unknown fields, non-decimal sample ids and trailing data are
// errors; split ranges are checked against a pipeline by [ParsePlan] and
// New.
func DecodePlanFile(b []byte, name string) (*PlanFile, error) {
	if len(b) > maxPlanFile {
		return nil, configErr("plan %s: %d bytes, limit %d", name, len(b), maxPlanFile)
	}
	var raw struct {
		Pipeline string         `json:"pipeline"`
		Default  int            `json:"default"`
		Splits   map[string]int `json:"splits"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, configErr("plan %s: %v", name, err)
	}
	if dec.More() {
		return nil, configErr("plan %s: data after the plan object", name)
	}
	f := &PlanFile{PlanName: name, Pipeline: raw.Pipeline, Default: raw.Default, Splits: make(map[uint64]int, len(raw.Splits))}
	for s, k := range raw.Splits {
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, configErr("plan %s: sample %q is not a decimal id", name, s)
		}
		f.Splits[id] = k
	}
	return f, nil
}

// ParsePlan resolves a plan name: nooff, alloff, resizeoff, or the path of
// a plan file.
func ParsePlan(name string, p *ops.Pipeline) (Plan, error) {
	switch name {
	case "", "nooff":
		return NoOff(), nil
	case "alloff":
		return AllOff(p), nil
	case "resizeoff":
		return ResizeOff(p)
	}
	f, err := ReadPlanFile(name)
	if err != nil {
		return nil, err
	}
	return f, checkPlan(f, p)
}

// checkPlan validates the splits a plan can enumerate and, for a plan file,
// its pipeline. Other plans are checked per sample as the epoch runs.
func checkPlan(plan Plan, p *ops.Pipeline) error {
	n := p.Len()
	if f, ok := plan.(*PlanFile); ok && f.Pipeline != "" && f.Pipeline != p.ID() {
		return configErr("plan %s is for pipeline %s, running %s", f.Name(), f.Pipeline, p.ID())
	}
	e, ok := plan.(interface{ splits() (int, []int) })
	if !ok {
		return nil
	}
	def, ks := e.splits()
	for _, k := range append(ks, def) {
		if err := validSplit(p, k, n); err != nil {
			return configErr("plan %s: %v", plan.Name(), err)
		}
	}
	return nil
}

// validSplit checks k: in [0, n], or ops.SplitCut where p has it.
func validSplit(p *ops.Pipeline, k, n int) error {
	if k == ops.SplitCut {
		if !p.CanCut() {
			return fmt.Errorf("split %d (the JPEG-domain crop) needs a pipeline that starts with decode, random_resized_crop; %s does not", k, p.ID())
		}
		return nil
	}
	if k < 0 || k > n {
		return fmt.Errorf("split %d outside [0, %d]", k, n)
	}
	return nil
}

// splitOf is plan's split for sample, checked against p and n ops.
func splitOf(plan Plan, sample uint64, p *ops.Pipeline, n int) (int, error) {
	k := plan.Split(sample)
	if err := validSplit(p, k, n); err != nil {
		return 0, fmt.Errorf("%w: plan %s: sample %d: %v", ErrConfig, plan.Name(), sample, err)
	}
	return k, nil
}
