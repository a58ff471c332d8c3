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

// cpuOnly answers Info with a fixed process CPU.
type cpuOnly struct {
	dataplanepb.StorageClient
	cpu uint64
	err error
}

func (c cpuOnly) Info(context.Context, *dataplanepb.InfoRequest, ...grpc.CallOption) (*dataplanepb.InfoResponse, error) {
	return &dataplanepb.InfoResponse{ProcessCpuNs: c.cpu}, c.err
}

// TestPerByte: the storage CPU per byte beyond the ops is the agents'
// process CPU over the epoch less their ops' CPU, over the bytes they
// sent; agents without the figure, or that do not answer, are left out.
func TestPerByte(t *testing.T) {
	mk := func(cpu0, cpu1 uint64, ops, bytes int64, err error) Agent {
		return Agent{Client: cpuOnly{cpu: cpu1, err: err}, Start: CPU{Proc: cpu0}, Got: bytes, Ops: ops, Timeout: time.Second}
	}
	agents := []Agent{
		mk(1e9, 1e9+30e6, 10e6, 2<<20, nil), // 20 ms for 2 MiB
		mk(5e8, 5e8+10e6, 0, 2<<20, nil),    // 10 ms for 2 MiB
		mk(0, 9e9, 0, 2<<20, nil),           // no figure at the start
		mk(1e9, 2e9, 0, 2<<20, errors.New("gone")),
	}
	want := 30e6 / float64(4<<20)
	if got := PerByte(context.Background(), agents); got < want*0.999 || got > want*1.001 {
		t.Fatalf("PerByte %v ns/B, want %v", got, want)
	}
	if got := PerByte(context.Background(), []Agent{mk(1, 1e6, 0, 1000, nil)}); got != 0 {
		t.Fatalf("PerByte %v from 1000 bytes, want 0 (too few)", got)
	}
}
