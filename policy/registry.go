package policy

import (
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/profiler"
)

// Policy is one entry of the registry: a policy's name and how it plans
// one storage node (Single) and a cluster of nodes (Cluster), each nil
// where the policy has no such form. A static policy, one that splits
// every sample alike whatever the profile, also gives that split for a
// pipeline (Static), so that an agent can run it before any profile
// exists.
type Policy struct {
	Name    string
	Single  func(p *profiler.Profile, r Resources) (Plan, error)
	Cluster func(p *profiler.Profile, c Cluster, pl *Placement) (Plan, error)
	Static  func(p *ops.Pipeline) (int, error)
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

// single adapts a single-node policy that cannot fail.
func single(f func(*profiler.Profile, Resources) Plan) func(*profiler.Profile, Resources) (Plan, error) {
	return func(p *profiler.Profile, r Resources) (Plan, error) { return f(p, r), nil }
}

// resizeOff is ResizeOff at the profile's crop split.
func resizeOff(p *profiler.Profile, r Resources) (Plan, error) {
	k := CropSplit(p)
	if k < 0 {
		return Plan{}, fmt.Errorf("%w: %s", ErrNoCropOp, p.Pipeline)
	}
	return ResizeOff(p, r, k), nil
}

// Registry is the one list of policies, in the order reports show them;
// Names and ClusterNames are its single-node and cluster policies.
var Registry = []Policy{
	{Name: NameNoOff, Single: single(NoOff), Cluster: ClusterNoOff,
		Static: func(*ops.Pipeline) (int, error) { return 0, nil }},
	{Name: NameAllOff, Single: single(AllOff),
		Static: func(p *ops.Pipeline) (int, error) { return p.Len(), nil }},
	{Name: NameResizeOff, Single: resizeOff, Static: resizeOffSplit},
	{Name: NameFastFlow, Single: single(FastFlow)},
	{Name: NameRoundRobin, Cluster: ClusterRoundRobin},
	{Name: NameSOPHON, Single: single(SOPHON), Cluster: ClusterSOPHON},
	{Name: NameOptimal, Single: single(Optimal), Cluster: ClusterOptimal},
	{Name: NameLRU, Single: single(LRU),
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
	Names = names(func(p Policy) bool { return p.Single != nil })
	// ClusterNames lists the cluster policies, in the order reports show
	// them.
	ClusterNames = names(func(p Policy) bool { return p.Cluster != nil })
)

// ErrUnknownPolicy is wrapped by ByName's and ClusterByName's errors for a
// name without that form in the registry.
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

// ByName plans p under r with the named policy. It fails for a name not in
// Names, for a pipeline of more than MaxClusterOps ops (ErrClusterProfile)
// and for resizeoff when p's pipeline has no crop op.
func ByName(name string, p *profiler.Profile, r Resources) (Plan, error) {
	if e, ok := Lookup(name); ok && e.Single != nil {
		if p.N() > MaxClusterOps {
			return Plan{}, clusterErr(ErrClusterProfile, "profile.ops", "%d ops, at most %d", p.N(), MaxClusterOps)
		}
		return e.Single(p, r)
	}
	return Plan{}, fmt.Errorf("%w %q (one of %v)", ErrUnknownPolicy, name, Names)
}

// ClusterByName plans p on cluster c under placement pl with the named
// cluster policy. It fails for a name not in ClusterNames (wrapping
// ErrUnknownPolicy) and where the cluster, placement or profile is
// invalid.
func ClusterByName(name string, p *profiler.Profile, c Cluster, pl *Placement) (Plan, error) {
	if e, ok := Lookup(name); ok && e.Cluster != nil {
		return e.Cluster(p, c, pl)
	}
	return Plan{}, fmt.Errorf("%w %q for a cluster (one of %v)", ErrUnknownPolicy, name, ClusterNames)
}
