// Package errkind maps errors to the data plane's per-sample error kinds
// (dataplanepb.ErrorKind), one table for both agents: the storage agent
// puts the kind on the wire, the compute agent names local failures with
// the same kinds.
package errkind

import (
	"errors"
	"strings"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Pair maps an agent's own sentinel error to a kind.
type Pair struct {
	Err  error
	Kind dataplanepb.ErrorKind
}

// opsKinds are the op library's sentinels, in the order they are tried.
var opsKinds = []Pair{
	{ops.ErrEmpty, dataplanepb.ErrorKind_ERROR_KIND_EMPTY},
	{ops.ErrNotJPEG, dataplanepb.ErrorKind_ERROR_KIND_NOT_JPEG},
	{ops.ErrTruncated, dataplanepb.ErrorKind_ERROR_KIND_TRUNCATED},
	{ops.ErrCorrupt, dataplanepb.ErrorKind_ERROR_KIND_CORRUPT},
	{ops.ErrTooLarge, dataplanepb.ErrorKind_ERROR_KIND_TOO_LARGE},
	{wireform.ErrTooLarge, dataplanepb.ErrorKind_ERROR_KIND_TOO_LARGE},
	{ops.ErrUnsupported, dataplanepb.ErrorKind_ERROR_KIND_UNSUPPORTED},
	{ops.ErrSplit, dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST},
	{ops.ErrSpec, dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST},
	{ops.ErrKind, dataplanepb.ErrorKind_ERROR_KIND_BAD_REQUEST},
	{ops.ErrDeadline, dataplanepb.ErrorKind_ERROR_KIND_DEADLINE},
}

// Of is err's kind: the first of extra (an agent's own sentinels) that err
// wraps, else the op library's, else INTERNAL.
func Of(err error, extra ...Pair) dataplanepb.ErrorKind {
	for _, tables := range [][]Pair{extra, opsKinds} {
		for _, m := range tables {
			if errors.Is(err, m.Err) {
				return m.Kind
			}
		}
	}
	return dataplanepb.ErrorKind_ERROR_KIND_INTERNAL
}

// Name is the kind without its prefix: ERROR_KIND_NOT_JPEG -> "NOT_JPEG".
func Name(k dataplanepb.ErrorKind) string {
	return strings.TrimPrefix(k.String(), "ERROR_KIND_")
}
