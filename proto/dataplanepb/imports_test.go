package dataplanepb

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingOfTheModule: the wire contract sits at the bottom of
// the module's imports; nothing of the module is below it.
func TestImportsNothingOfTheModule(t *testing.T) {
	const self = "github.com/sophon-dl/sophon/proto/dataplanepb"
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != self {
		t.Fatalf("go list -deps . listed %v, not %s's imports", deps, self)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "github.com/sophon-dl/sophon/") && dep != self {
			t.Errorf("%s imports %s", self, dep)
		}
	}
}
