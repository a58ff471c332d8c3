package policy

import (
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/profiler"
)

// Policy is one entry of the registry: a policy's name and how it plans
// one storage node (Single) and a cluster of nodes (Cluster), each nil
// where the policy has no such form.
type Policy struct {
	Name    string
	Single  func(p *profiler.Profile, r Resources) (Plan, error)
	Cluster func(p *profiler.Profile, c Cluster, pl *Placement) (Plan, error)
}

// single adapts a single-node policy that cannot fail.
func single(f func(*profiler.Profile, Resources) Plan) func(*profiler.Profile, Resources) (Plan, error) {
	return func(p *profiler.Profile, r Resources) (Plan, error) { return f(p, r), nil }
}

// resizeOff is ResizeOff at the profile's crop split.
func resizeOff(p *profiler.Profile, r Resources) (Plan, error) {
	k := CropSplit(p)
	if k < 0 {
		return Plan{}, fmt.Errorf("policy: resizeoff: pipeline %s has no crop op", p.Pipeline)
	}
	return ResizeOff(p, r, k), nil
}

// Registry is the one list of policies, in the order reports show them;
// Names and ClusterNames are its single-node and cluster policies.
var Registry = []Policy{
	{Name: NameNoOff, Single: single(NoOff), Cluster: ClusterNoOff},
	{Name: NameAllOff, Single: single(AllOff)},
	{Name: NameResizeOff, Single: resizeOff},
	{Name: NameFastFlow, Single: single(FastFlow)},
	{Name: NameRoundRobin, Cluster: ClusterRoundRobin},
	{Name: NameSOPHON, Single: single(SOPHON), Cluster: ClusterSOPHON},
	{Name: NameOptimal, Single: single(Optimal), Cluster: ClusterOptimal},
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

// lookup is the registry's entry named name.
func lookup(name string) (Policy, bool) {
	for _, p := range Registry {
		if p.Name == name {
			return p, true
		}
	}
	return Policy{}, false
}

// ByName plans p under r with the named policy. It fails for a name not in
// Names, and for resizeoff when p's pipeline has no crop op.
func ByName(name string, p *profiler.Profile, r Resources) (Plan, error) {
	if e, ok := lookup(name); ok && e.Single != nil {
		return e.Single(p, r)
	}
	return Plan{}, fmt.Errorf("%w %q (one of %v)", ErrUnknownPolicy, name, Names)
}

// ClusterByName plans p on cluster c under placement pl with the named
// cluster policy. It fails for a name not in ClusterNames (wrapping
// ErrUnknownPolicy) and where the cluster, placement or profile is
// invalid.
func ClusterByName(name string, p *profiler.Profile, c Cluster, pl *Placement) (Plan, error) {
	if e, ok := lookup(name); ok && e.Cluster != nil {
		return e.Cluster(p, c, pl)
	}
	return Plan{}, fmt.Errorf("%w %q for a cluster (one of %v)", ErrUnknownPolicy, name, ClusterNames)
}
