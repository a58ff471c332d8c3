// Package s3gwtest starts the real S3 server of package s3gw for tests.
package s3gwtest

import (
	"context"
	"testing"

	"github.com/sophon-dl/sophon/internal/s3gw"
	"github.com/sophon-dl/sophon/internal/testutil"
)

// Demand is the name under which a run demands versitygw
// (testutil.DemandEnv): make test installs it, then demands it.
const Demand = "versitygw"

// Require skips the test visibly when versitygw is missing, and fails it
// under CI=true or when the run demands it (make test does).
func Require(tb testing.TB) {
	tb.Helper()
	if _, err := s3gw.Find(); err != nil {
		testutil.RequireNamed(tb, Demand, "%v", err)
	}
}

// Start starts a server over root for a test, stopped at its end; without
// versitygw it skips or fails the test as Require does.
func Start(tb testing.TB, root, access, secret string) *s3gw.Server {
	tb.Helper()
	Require(tb)
	s, err := s3gw.Start(context.Background(), s3gw.Config{Root: root, Access: access, Secret: secret})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}
