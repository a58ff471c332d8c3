package policy

import (
	"errors"
	"fmt"

	"github.com/sophon-dl/sophon/profiler"
)

// Names lists every policy, in the order reports show them.
var Names = []string{NameNoOff, NameAllOff, NameResizeOff, NameFastFlow, NameSOPHON, NameOptimal}

// ErrUnknownPolicy is wrapped by ByName's error for a name not in Names.
var ErrUnknownPolicy = errors.New("policy: unknown policy")

// ByName plans p under r with the named policy. It fails for a name not in
// Names, and for resizeoff when p's pipeline has no crop op.
func ByName(name string, p *profiler.Profile, r Resources) (Plan, error) {
	switch name {
	case NameNoOff:
		return NoOff(p, r), nil
	case NameAllOff:
		return AllOff(p, r), nil
	case NameResizeOff:
		k := CropSplit(p)
		if k < 0 {
			return Plan{}, fmt.Errorf("policy: resizeoff: pipeline %s has no crop op", p.Pipeline)
		}
		return ResizeOff(p, r, k), nil
	case NameFastFlow:
		return FastFlow(p, r), nil
	case NameSOPHON:
		return SOPHON(p, r), nil
	case NameOptimal:
		return Optimal(p, r), nil
	}
	return Plan{}, fmt.Errorf("%w %q (one of %v)", ErrUnknownPolicy, name, Names)
}
