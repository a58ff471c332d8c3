// Package s3gwtest starts the real S3 server of package s3gw for tests.
package s3gwtest

import (
	"context"
	"testing"

	"github.com/sophon-dl/sophon/internal/s3gw"
	"github.com/sophon-dl/sophon/internal/testutil"
)

// Start starts a server over root for a test, stopped at its end. It
// skips the test visibly when versitygw is missing, and fails it under
// CI=true.
func Start(tb testing.TB, root, access, secret string) *s3gw.Server {
	tb.Helper()
	if _, err := s3gw.Find(); err != nil {
		testutil.Require(tb, "%v", err)
	}
	s, err := s3gw.Start(context.Background(), s3gw.Config{Root: root, Access: access, Secret: secret})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}
