package testutil

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Python is Debian's interpreter, the one whose packages (python3-torch,
// python3-torchvision, python3-numpy, python3-pil) the tests use.
const Python = "/usr/bin/python3"

// pythonChecks caches each import check's outcome by its module list:
// importing torch takes about a CPU second, and a test binary asks often.
var pythonChecks sync.Map // string -> *pythonCheck

type pythonCheck struct {
	once sync.Once
	err  error
	out  []byte
}

// RequirePython skips tb, or fails it in CI (Require), unless Python
// imports every one of modules; packages names the Debian packages that
// provide them, for the message. Each list is tried once per test binary.
func RequirePython(tb testing.TB, packages string, modules ...string) {
	tb.Helper()
	key := strings.Join(modules, ", ")
	v, _ := pythonChecks.LoadOrStore(key, &pythonCheck{})
	c := v.(*pythonCheck)
	c.once.Do(func() {
		c.out, c.err = exec.Command(Python, "-c", "import "+key).CombinedOutput()
	})
	if c.err != nil {
		Require(tb, "%s cannot import %s (apt-get install %s): %v %s", Python, key, packages, c.err, bytes.TrimSpace(c.out))
	}
}
