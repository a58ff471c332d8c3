package sendcost

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestSpent: the CPU beyond the ops is the agent's process CPU less the
// ops, and, from an agent that counts what it sent to every job, this
// job's part of it by bytes, so that another job's ops and sending beside
// it are not charged to this one.
func TestSpent(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name string
		a, b CPU
		want float64
		ok   bool
	}{
		// Alone, an agent before the counters: 400 ms of process CPU, 100
		// of it this job's ops.
		{"no counters", CPU{Proc: 1e9}, CPU{Proc: 1.4e9}, 300e6, true},
		{"alone", CPU{1e9, 10 * mb, 1e8}, CPU{1.4e9, 14 * mb, 2e8}, 300e6, true},
		// Another job got as many bytes and ran 500 ms of ops meanwhile:
		// 1.2 s of process CPU, 600 ms of it ops, half the rest this job's.
		{"beside another job", CPU{1e9, 10 * mb, 1e8}, CPU{2.2e9, 18 * mb, 7e8}, 300e6, true},
		// Counters that went back: as without them.
		{"counters went back", CPU{1e9, 10 * mb, 1e8}, CPU{1.4e9, 1 * mb, 0}, 300e6, true},
		{"ops over the process CPU", CPU{Proc: 1e9}, CPU{Proc: 1.05e9}, 0, true},
		{"no process CPU", CPU{}, CPU{Proc: 9e9}, 0, false},
		{"restarted", CPU{Proc: 1e9}, CPU{Proc: 1e8}, 0, false},
	} {
		got, ok := Spent(tc.a, tc.b, 4*mb, 100e6)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-3 {
			t.Errorf("%s: %v ns, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

type infoClient struct {
	dataplanepb.StorageClient
	err error
}

func (c infoClient) Info(context.Context, *dataplanepb.InfoRequest, ...grpc.CallOption) (*dataplanepb.InfoResponse, error) {
	return &dataplanepb.InfoResponse{ProcessCpuNs: 7, SentBytes: 8, SentOpsCpuNs: 9}, c.err
}

// TestRead: the Info's three figures, or nothing from an agent that does
// not answer.
func TestRead(t *testing.T) {
	if c, ok := Read(context.Background(), infoClient{}, time.Second); !ok || c != (CPU{7, 8, 9}) {
		t.Errorf("got %+v %v", c, ok)
	}
	if _, ok := Read(context.Background(), infoClient{err: errors.New("gone")}, time.Second); ok {
		t.Error("read from an agent that did not answer")
	}
}
