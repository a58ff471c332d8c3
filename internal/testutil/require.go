package testutil

// Tests that need something of the machine (root, namespaces, tc, cgroups,
// Pillow, torch, versitygw) skip visibly on a developer's machine and fail
// in CI, where the environment must have it: with CI=true a missing
// requirement is a failure, not a silent pass. make test demands by name
// what it installs itself (DemandEnv), so that those tests fail rather than
// skip on any machine it runs on.

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// DemandEnv names the environment variable that lists, comma-separated,
// the requirements a run demands on any machine ("versitygw": make test
// installs it before the tests run).
const DemandEnv = "SOPHON_TEST_DEMAND"

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

// Demanded reports whether a missing requirement called name must fail the
// tests: under CI=true every requirement is, else those listed in
// DemandEnv.
func Demanded(name string) bool {
	return InCI() || slices.Contains(strings.Split(os.Getenv(DemandEnv), ","), name)
}

// RequireNamed is Require for a requirement that a run can demand by name
// (DemandEnv): it fails tb when Demanded(name), and skips it otherwise.
func RequireNamed(tb testing.TB, name, format string, args ...any) {
	tb.Helper()
	if Demanded(name) {
		tb.Fatalf("%s demanded (CI=true or %s=%s) but missing: "+format, append([]any{name, DemandEnv, os.Getenv(DemandEnv)}, args...)...)
	}
	tb.Skipf("SKIP: "+format, args...)
}
