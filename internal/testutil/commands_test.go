package testutil

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// TestCommandsImportNoTestPackage: no shipped binary links a test helper
// (a module package named testutil or ending in "test", such as
// policytest once was for the policy command) nor the standard library's
// testing package.
func TestCommandsImportNoTestPackage(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		Require(t, "no go command to list the binaries' imports: %v", err)
	}
	const module = "github.com/sophon-dl/sophon/"
	for name, dir := range Commands {
		cmd := exec.Command(goTool, "list", "-deps", "./"+dir)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: go list -deps: %v", name, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 2 {
			t.Fatalf("%s: go list -deps listed %v, not the command's imports", name, deps)
		}
		for _, dep := range deps {
			base := path.Base(dep)
			if dep == "testing" || strings.HasPrefix(dep, module) && strings.HasSuffix(base, "test") || base == "testutil" {
				t.Errorf("%s imports test package %s", name, dep)
			}
		}
	}
}
