package planner

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
)

// The compute agent runs a *policy.Plan, the one plan type: per listed
// sample its split k (the storage agent runs ops[0:k] and the compute
// agent ops[k:n]) and, for a policy's plan, its codec; Default for every
// other sample. k may
// also be ops.SplitCut (-1), the JPEG-domain crop, for pipelines that have
// it (ops.Pipeline.CanCut): the storage agent cuts the JPEG to the crop
// box and the compute agent runs every op from the cut. The agent's own plans are
// static (NoOff, AllOff, ResizeOff: a Default and no entries) or plan
// files (DecodePlanFile); a policy's come from the Planner. CheckPlan
// checks every split a plan names against the pipeline.

// badPlan is a plan the agent cannot run, as ErrPlan.
func badPlan(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPlan, fmt.Sprintf(format, args...))
}

// staticPlan is the registry's static policy name for pipeline p
// (policy.StaticPlan), its errors as ErrPlan.
func staticPlan(name string, p *ops.Pipeline) (*policy.Plan, error) {
	plan, ok, err := policy.StaticPlan(name, p)
	if !ok {
		return nil, badPlan("%s: not a static policy", name)
	}
	if err != nil {
		return nil, badPlan("%v", err)
	}
	return plan, nil
}

// IsStatic reports whether plan is one of NoOff, AllOff and ResizeOff.
func IsStatic(plan *policy.Plan) bool {
	if e, ok := policy.Lookup(plan.Policy); !ok || e.Static == nil {
		return false
	}
	return len(plan.IDs) == 0 && len(plan.Split) == 0
}

// NoOff fetches raw bytes for every sample (k = 0).
func NoOff() *policy.Plan {
	plan, _ := staticPlan(policy.NameNoOff, nil) // nooff's split needs no pipeline and cannot fail
	return plan
}

// AllOff runs the whole pipeline on the storage agent (k = n).
func AllOff(p *ops.Pipeline) *policy.Plan {
	plan, _ := staticPlan(policy.NameAllOff, p) // alloff's split is p.Len() and cannot fail
	return plan
}

// ResizeOff splits right after the pipeline's first crop op
// (random_resized_crop, decode_random_resized_crop or center_crop).
func ResizeOff(p *ops.Pipeline) (*policy.Plan, error) { return staticPlan(policy.NameResizeOff, p) }

// PlanOf is the plan named name that gives the samples in splits their
// split and every other sample def, for pipeline (an ops.Pipeline.ID();
// empty: any): a plan file's plan, its entries in ascending id order.
func PlanOf(name, pipeline string, def int, splits map[uint64]int) *policy.Plan {
	pl := &policy.Plan{Policy: name, Pipeline: pipeline, Default: def, IDs: make([]uint64, 0, len(splits))}
	for id := range splits {
		pl.IDs = append(pl.IDs, id)
	}
	slices.Sort(pl.IDs)
	pl.Split = make([]int, len(pl.IDs))
	for i, id := range pl.IDs {
		pl.Split[i] = splits[id]
	}
	return pl
}

// A plan file is a per-sample plan, stored as JSON:
//
//	{
//	  "pipeline": "imagenet-train@1f8b59f902fd",  // ops.Pipeline.ID(); empty: any
//	  "default": 0,                               // k for samples not listed
//	  "splits": {"17": 2, "42": 5, "43": -1},     // sample id (decimal) -> k
//	  "cached": [3, 17]                           // optional: resident in the node's cache
//	}
//
// Every k must lie in [0, n] for the pipeline's n ops, or be -1
// (ops.SplitCut) where the pipeline has the JPEG-domain crop. The samples
// under "cached" are the plan's residency (policy.Plan.Cached) for the
// compute agent's planned cache (--cache-dir): fetched raw until cached,
// then read locally; a cached sample without a split gets 0. Its plan is
// named after the file.

// ReadPlanFile reads a per-sample plan file.
func ReadPlanFile(path string) (*policy.Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, badPlan("plan: %v", err)
	}
	return DecodePlanFile(b, path)
}

// maxPlanFile bounds a plan file's size (about 30 bytes per listed sample).
const maxPlanFile = 1 << 30

// DecodePlanFile parses a plan file's JSON into the plan named name.
// Unknown fields, non-decimal sample ids, an id listed twice and trailing
// data are errors; split ranges are checked against a pipeline by
// [ParsePlan] and [CheckPlan].
func DecodePlanFile(b []byte, name string) (*policy.Plan, error) {
	if len(b) > maxPlanFile {
		return nil, badPlan("plan %s: %d bytes, limit %d", name, len(b), maxPlanFile)
	}
	var raw struct {
		Pipeline string         `json:"pipeline"`
		Default  int            `json:"default"`
		Splits   map[string]int `json:"splits"`
		Cached   []uint64       `json:"cached"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, badPlan("plan %s: %v", name, err)
	}
	if dec.More() {
		return nil, badPlan("plan %s: data after the plan object", name)
	}
	splits := make(map[uint64]int, len(raw.Splits))
	for s, k := range raw.Splits {
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, badPlan("plan %s: sample %q is not a decimal id", name, s)
		}
		if _, dup := splits[id]; dup {
			return nil, badPlan("plan %s: sample %d listed twice", name, id)
		}
		splits[id] = k
	}
	cached := make(map[uint64]bool, len(raw.Cached))
	for _, id := range raw.Cached {
		if cached[id] {
			return nil, badPlan("plan %s: sample %d cached twice", name, id)
		}
		cached[id] = true
		if _, ok := splits[id]; !ok {
			splits[id] = 0
		}
	}
	pl := PlanOf(name, raw.Pipeline, raw.Default, splits)
	if len(cached) > 0 {
		pl.Cached = make([]bool, len(pl.IDs))
		for i, id := range pl.IDs {
			pl.Cached[i] = cached[id]
		}
	}
	return pl, nil
}

// ParsePlan resolves a plan name: a static policy of the registry (nooff,
// the default; alloff; resizeoff) or the path of a plan file.
func ParsePlan(name string, p *ops.Pipeline) (*policy.Plan, error) {
	if _, ok, _ := policy.StaticPlan(cmp.Or(name, policy.NameNoOff), p); ok {
		return staticPlan(cmp.Or(name, policy.NameNoOff), p)
	}
	f, err := ReadPlanFile(name)
	if err != nil {
		return nil, err
	}
	return f, CheckPlan(f, p)
}

// CheckPlan validates a plan against the pipeline p: the pipeline it is
// for, its shape (a split per listed sample, a codec per listed sample or
// none) and every split it names.
func CheckPlan(plan *policy.Plan, p *ops.Pipeline) error {
	if plan.Pipeline != "" && plan.Pipeline != p.ID() {
		return badPlan("plan %s is for pipeline %s, running %s", plan.Policy, plan.Pipeline, p.ID())
	}
	if len(plan.Split) != len(plan.IDs) || plan.Compress != nil && len(plan.Compress) != len(plan.IDs) ||
		plan.Cached != nil && len(plan.Cached) != len(plan.IDs) {
		return badPlan("plan %s: %d samples, %d splits, %d codecs, %d residencies", plan.Policy, len(plan.IDs), len(plan.Split), len(plan.Compress), len(plan.Cached))
	}
	n := p.Len()
	if err := ValidSplit(p, plan.Default, n); err != nil {
		return badPlan("plan %s: default: %v", plan.Policy, err)
	}
	for i, k := range plan.Split {
		if err := ValidSplit(p, k, n); err != nil {
			return badPlan("plan %s: sample %d: %v", plan.Policy, plan.IDs[i], err)
		}
	}
	return nil
}
