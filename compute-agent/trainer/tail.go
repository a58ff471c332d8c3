package trainer

import (
	"fmt"

	"github.com/sophon-dl/sophon/ops"
)

// Tail is the end of a pipeline that the trainer client runs on
// its device: to_tensor, then normalize when present.
type Tail struct {
	Normalize *ops.Normalize
}

// Len is the number of ops in the tail: to_tensor, and normalize where it
// has one; 0 for a nil Tail (no tail).
func (t *Tail) Len() int {
	switch {
	case t == nil:
		return 0
	case t.Normalize != nil:
		return 2
	}
	return 1
}

// CutTail splits a pipeline ending in to_tensor (and maybe normalize) into
// the prefix the agent runs, which ends in a uint8 image, and that tail.
func CutTail(p *ops.Pipeline) (*ops.Pipeline, *Tail, error) {
	n := p.Len()
	tail := &Tail{}
	cut := n
	if nz, ok := p.Op(n - 1).(ops.Normalize); ok && n >= 2 {
		tail.Normalize = &nz
		cut--
	}
	if _, ok := p.Op(cut - 1).(ops.ToTensor); !ok {
		return nil, nil, fmt.Errorf("uint8 slots: pipeline %s must end in to_tensor or to_tensor, normalize (or use --dtype float32)", p.ID())
	}
	cut--
	spec := p.Spec()
	spec.Name += "-uint8"
	spec.Ops = spec.Ops[:cut]
	q, err := spec.Build()
	if err != nil {
		return nil, nil, fmt.Errorf("uint8 slots: %v", err)
	}
	return q, tail, nil
}
