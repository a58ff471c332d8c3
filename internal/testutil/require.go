package testutil

// Tests that need something of the machine (root, namespaces, tc, cgroups,
// Pillow, torch) skip visibly on a developer's machine and fail in CI, where
// the environment must have it: with CI=true a missing requirement is a
// failure, not a silent pass.

import (
	"os"
	"testing"
)

// InCI reports whether the tests run in CI (the environment variable CI is
// "true", as CI systems and .ci/run set it).
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips tb with the reason, prefixed "SKIP: ", or, in CI, fails it:
// CI must have what the test needs.
func Require(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("CI=true but a requirement is missing: "+format, args...)
	}
	tb.Skipf("SKIP: "+format, args...)
}
