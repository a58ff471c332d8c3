package engine

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/sophon-dl/sophon/"

// deps is what go list -deps says pkg imports, directly or not.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(goCmd); err != nil {
		goCmd = "go"
	}
	out, err := exec.Command(goCmd, "list", "-deps", mod+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	d := strings.Fields(string(out))
	if len(d) == 0 || d[len(d)-1] != mod+pkg {
		t.Fatalf("go list -deps %s ended with %v, want the package itself last", pkg, d[max(0, len(d)-1):])
	}
	return d
}

// TestEngineImportsNoPlanner: the engine runs a plan (Plan) and imports
// neither the planner nor the policy, directly or through another
// package; and the walk of an epoch goes one way, root -> engine ->
// trainer, batch and cache (-> schedule, report), with the catalog,
// linkwatch and sendcost below the engine too: none of those below
// imports the engine or the root.
func TestEngineImportsNoPlanner(t *testing.T) {
	for _, tc := range []struct {
		pkg    string
		forbid []string
	}{
		{"compute-agent/engine", []string{"compute-agent/planner", "compute-agent/planner/stage1", "policy", "compute-agent/computeagent"}},
		{"compute-agent/planner/stage1", []string{"compute-agent/planner", "compute-agent/engine", "compute-agent/computeagent"}},
		{"compute-agent/trainer", []string{"compute-agent/engine", "compute-agent/planner", "compute-agent/computeagent"}},
		{"compute-agent/cache", []string{"compute-agent/engine", "compute-agent/planner", "compute-agent/computeagent"}},
		{"compute-agent/linkwatch", []string{"compute-agent/engine", "compute-agent/planner", "compute-agent/computeagent"}},
		{"compute-agent/batch", []string{"compute-agent/engine", "compute-agent/trainer", "compute-agent/planner", "compute-agent/computeagent"}},
		{"compute-agent/sendcost", []string{"compute-agent/engine", "compute-agent/planner", "compute-agent/computeagent"}},
		{"compute-agent/catalog", []string{"compute-agent/engine", "compute-agent/trainer", "compute-agent/cache", "compute-agent/planner", "policy", "compute-agent/computeagent"}},
		{"compute-agent/schedule", []string{"compute-agent/engine", "compute-agent/trainer", "compute-agent/cache", "compute-agent/planner", "policy"}},
	} {
		d := deps(t, tc.pkg)
		for _, f := range tc.forbid {
			if slices.Contains(d, mod+f) {
				t.Errorf("%s imports %s", tc.pkg, f)
			}
		}
	}
}
