package catalog

import (
	"context"
	"errors"
	"testing"
)

// errMismatch is a reason to refuse an agent.
var errMismatch = errors.New("sample content does not match the catalog")

// TestRefusals: a refused agent's guarded client opens no stream, the
// first reason sticks, other agents are unaffected, and a nil *Refusals
// refuses nothing.
func TestRefusals(t *testing.T) {
	var none *Refusals
	none.Refuse("a", errors.New("ignored"))
	if err := none.Refusal("a"); err != nil {
		t.Fatalf("nil refusals: %v, want nil", err)
	}
	rs := &Refusals{}
	g := rs.Guard("a", nil) // never reached once refused
	rs.Refuse("a", errMismatch)
	rs.Refuse("a", errors.New("second"))
	if _, err := g.Fetch(context.Background()); !errors.Is(err, errMismatch) {
		t.Errorf("fetch from a refused agent: %v, want errMismatch", err)
	}
	if err := rs.Refusal("b"); err != nil {
		t.Errorf("agent b: %v, want not refused", err)
	}
}
