package policy

import (
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/ops"
)

// Policy is one entry of the registry: a policy's name, how it plans an
// instance (Plan), which instances it plans: one-node ones (Single,
// OneNode's) and clusters (Cluster). A static policy, one that splits
// every sample alike whatever the profile, also gives that split for a
// pipeline (Static), so that an agent can run it before any profile
// exists.
type Policy struct {
	Name            string
	Plan            func(in Instance) (Plan, error)
	Single, Cluster bool
	Static          func(p *ops.Pipeline) (int, error)
}

// plans reports whether the policy plans in.
func (e Policy) plans(in Instance) bool {
	if in.one {
		return e.Single
	}
	return e.Cluster
}

// ErrNoCropOp is returned by resizeoff's Static for a pipeline without a
// crop op.
var ErrNoCropOp = errors.New("policy: resizeoff: pipeline has no crop op")

// resizeOffSplit is resizeoff's split of pipeline p: just after its first
// crop op.
func resizeOffSplit(p *ops.Pipeline) (int, error) {
	k, ok := p.CropSplit()
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrNoCropOp, p.ID())
	}
	return k, nil
}

// StaticPlan is the plan of the static policy named name for pipeline p:
// its split as the Default of every sample, no entries. ok is false when
// the registry has no static policy of that name (the caller may then
// read name as a plan file); err is set when the policy has no split for
// p (resizeoff without a crop op).
func StaticPlan(name string, p *ops.Pipeline) (plan *Plan, ok bool, err error) {
	e, found := Lookup(name)
	if !found || e.Static == nil {
		return nil, false, nil
	}
	k, err := e.Static(p)
	if err != nil {
		return nil, true, err
	}
	return &Plan{Policy: name, Default: k}, true, nil
}

// Registry is the one list of policies, in the order reports show them;
// Names and ClusterNames are its single-node and cluster policies.
var Registry = []Policy{
	{Name: NameNoOff, Plan: NoOff, Single: true, Cluster: true,
		Static: func(*ops.Pipeline) (int, error) { return 0, nil }},
	{Name: NameAllOff, Plan: AllOff, Single: true,
		Static: func(p *ops.Pipeline) (int, error) { return p.Len(), nil }},
	{Name: NameResizeOff, Plan: ResizeOff, Single: true, Static: resizeOffSplit},
	{Name: NameFastFlow, Plan: FastFlow, Single: true},
	{Name: NameRoundRobin, Plan: RoundRobin, Cluster: true},
	{Name: NameSOPHON, Plan: SOPHON, Single: true, Cluster: true},
	{Name: NameOptimal, Plan: Optimal, Single: true, Cluster: true},
	{Name: NameLRU, Plan: LRU, Single: true,
		Static: func(*ops.Pipeline) (int, error) { return 0, nil }},
}

// names lists the registry's policies that have a form.
func names(has func(Policy) bool) []string {
	var out []string
	for _, p := range Registry {
		if has(p) {
			out = append(out, p.Name)
		}
	}
	return out
}

var (
	// Names lists the single-node policies, in the order reports show
	// them.
	Names = names(func(p Policy) bool { return p.Single })
	// ClusterNames lists the cluster policies, in the order reports show
	// them.
	ClusterNames = names(func(p Policy) bool { return p.Cluster })
)

// ErrUnknownPolicy is wrapped by ByName's errors for a name the registry
// has no form of for the instance.
var ErrUnknownPolicy = errors.New("policy: unknown policy")

// Lookup is the registry's entry named name; ok is false when there is
// none.
func Lookup(name string) (p Policy, ok bool) {
	for _, p := range Registry {
		if p.Name == name {
			return p, true
		}
	}
	return Policy{}, false
}

// ByName plans in with the named policy. It fails for a name not in Names
// (one node) or ClusterNames (a cluster), wrapping ErrUnknownPolicy; where
// the cluster, the placement or the profile is invalid (a pipeline of
// more than MaxClusterOps ops: ErrClusterProfile); and for resizeoff when
// the pipeline has no crop op.
func ByName(name string, in Instance) (Plan, error) {
	if e, ok := Lookup(name); ok && e.plans(in) {
		return e.Plan(in)
	}
	return Plan{}, in.unknown(name)
}
