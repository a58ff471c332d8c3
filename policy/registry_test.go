package policy

import (
	"errors"
	"testing"

	"github.com/sophon-dl/sophon/policy/policytest"
)

func TestByName(t *testing.T) {
	p := policytest.Synthetic("openimages-like", 200, 3)
	r := Resources{LinkBytesPerSec: 12.5e6, StorageCores: 1, ComputeCores: 2, GPUSamplesPerSec: 1e4}
	for _, name := range Names {
		plan, err := ByName(name, p, r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if plan.Policy != name || len(plan.Split) != len(p.Samples) || !(plan.Pred.Seconds > 0) {
			t.Fatalf("%s: plan %q of %d splits predicting %v s", name, plan.Policy, len(plan.Split), plan.Pred.Seconds)
		}
	}
	if _, err := ByName("greedy", p, r); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown name: %v, want ErrUnknownPolicy", err)
	}
	q := *p
	q.Ops = []string{"decode", "normalize"}
	if _, err := ByName(NameResizeOff, &q, r); err == nil {
		t.Fatal("resizeoff planned a pipeline without a crop op")
	}
}
