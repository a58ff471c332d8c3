package engine

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestEngineImportsNoPlanner: the engine runs a plan (Plan) and imports
// neither the planner nor the policy, directly or through another
// package.
func TestEngineImportsNoPlanner(t *testing.T) {
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(goCmd); err != nil {
		goCmd = "go"
	}
	out, err := exec.Command(goCmd, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	const mod = "github.com/sophon-dl/sophon/"
	self := mod + "compute-agent/engine"
	if len(deps) == 0 || deps[len(deps)-1] != self {
		t.Fatalf("go list -deps ended with %v, want %s last", deps[max(0, len(deps)-1):], self)
	}
	for _, d := range deps {
		switch d {
		case mod + "compute-agent/planner", mod + "policy":
			t.Errorf("the engine imports %s", d)
		}
	}
}
