package policy

import (
	"errors"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy/synthetic"
	"github.com/sophon-dl/sophon/profiler"
)

func TestByName(t *testing.T) {
	p := synthetic.Profile("openimages-like", 200, 3)
	r := Resources{LinkBytesPerSec: 12.5e6, StorageCores: 1, ComputeCores: 2, GPUSamplesPerSec: 1e4}
	for _, name := range Names {
		plan, err := byName1(name, p, r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if plan.Policy != name || len(plan.Split) != len(p.Samples) || !(plan.Pred.Seconds > 0) {
			t.Fatalf("%s: plan %q of %d splits predicting %v s", name, plan.Policy, len(plan.Split), plan.Pred.Seconds)
		}
	}
	if _, err := byName1("greedy", p, r); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown name: %v, want ErrUnknownPolicy", err)
	}
	q := *p
	q.Ops = []string{"decode", "normalize"}
	if _, err := byName1(NameResizeOff, &q, r); err == nil {
		t.Fatal("resizeoff planned a pipeline without a crop op")
	}
}

// TestRegistry: Names and ClusterNames are the registry's forms, every
// cluster policy plans a cluster and a name without a form is refused.
func TestRegistry(t *testing.T) {
	if !slices.Equal(Names, []string{NameNoOff, NameAllOff, NameResizeOff, NameFastFlow, NameSOPHON, NameOptimal, NameLRU}) ||
		!slices.Equal(ClusterNames, []string{NameNoOff, NameRoundRobin, NameSOPHON, NameOptimal}) {
		t.Fatalf("Names %v, ClusterNames %v", Names, ClusterNames)
	}
	p := synthetic.Profile("openimages-like", 60, 3)
	r := Resources{LinkBytesPerSec: 12.5e6, StorageCores: 1, ComputeCores: 2, GPUSamplesPerSec: 1e4}
	c := SingleNode(r)
	pl := &Placement{Rank: make([]int32, len(p.Samples)), Set: make([]int32, len(p.Samples)), Sets: [][]int16{{0}}}
	for _, name := range ClusterNames {
		plan, err := ByName(name, On(p, c, pl))
		if err != nil || plan.Policy != name || len(plan.Replica) != len(p.Samples) || plan.Cluster == nil {
			t.Errorf("%s: plan %q, %d replicas, %v", name, plan.Policy, len(plan.Replica), err)
		}
	}
	for _, name := range []string{NameFastFlow, "greedy"} {
		if _, err := ByName(name, On(p, c, pl)); !errors.Is(err, ErrUnknownPolicy) {
			t.Errorf("cluster %s: %v, want ErrUnknownPolicy", name, err)
		}
	}
	if _, err := byName1(NameRoundRobin, p, r); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("single-node roundrobin: %v, want ErrUnknownPolicy", err)
	}
}

// TestStaticPlan: the static policies' plans are a Default alone, every
// other name is not static, and resizeoff needs a crop op.
func TestStaticPlan(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	crop, _ := p.CropSplit()
	for _, c := range []struct {
		name string
		ok   bool
		k    int
	}{{NameNoOff, true, 0}, {NameAllOff, true, p.Len()}, {NameResizeOff, true, crop}, {NameLRU, true, 0},
		{NameSOPHON, false, 0}, {NameOptimal, false, 0}, {"plan.json", false, 0}} {
		plan, ok, err := StaticPlan(c.name, p)
		if ok != c.ok || err != nil {
			t.Fatalf("%s: ok %v, err %v; want ok %v", c.name, ok, err, c.ok)
		}
		if ok && (plan.Policy != c.name || plan.Default != c.k || plan.IDs != nil || plan.Split != nil) {
			t.Errorf("%s: plan %+v, want a Default of %d alone", c.name, *plan, c.k)
		}
	}
	flat, err := ops.Spec{Name: "flat", Ops: []ops.OpSpec{{Op: "decode"}, {Op: "to_tensor"}}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := StaticPlan(NameResizeOff, flat); !ok || !errors.Is(err, ErrNoCropOp) {
		t.Errorf("resizeoff without a crop op: ok %v, err %v; want ErrNoCropOp", ok, err)
	}
}

// TestByNameTooManyOps: the planner numbers options in a byte, so ByName
// refuses longer pipelines rather than plan them wrong.
func TestByNameTooManyOps(t *testing.T) {
	p := &profiler.Profile{Ops: make([]string, MaxClusterOps+1)}
	if _, err := byName1(NameNoOff, p, Resources{}); !errors.Is(err, ErrClusterProfile) {
		t.Fatalf("%d ops: %v, want ErrClusterProfile", len(p.Ops), err)
	}
}
