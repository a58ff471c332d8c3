package stage1

import (
	"math"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/sendcost"
)

// TestTransportCores: the transport CPU of a link probe is the agent's
// process CPU beyond the ops, and, from an agent that counts what it sent
// to every job, this probe's part of it by bytes, so that another job's
// ops and sending beside it are not charged to this one.
func TestTransportCores(t *testing.T) {
	const mb = 1 << 20
	probe := probeResult{bytes: 4 * mb, elapsed: time.Second, storageNS: map[uint64]int64{1: 100e6}}
	for _, tc := range []struct {
		name   string
		c0, c1 sendcost.CPU
		want   float64
	}{
		// Alone, an agent before the counters: 400 ms of process CPU, 100
		// of it this probe's ops: 0.3 cores.
		{"no counters", sendcost.CPU{Proc: 1e9}, sendcost.CPU{Proc: 1.4e9}, 0.3},
		// Alone, with counters: the same.
		{"alone", sendcost.CPU{Proc: 1e9, Sent: 10 * mb, Ops: 1e8}, sendcost.CPU{Proc: 1.4e9, Sent: 14 * mb, Ops: 2e8}, 0.3},
		// Another job got as many bytes and ran 500 ms of ops meanwhile:
		// 1.2 s of process CPU, 600 ms of it ops, half the rest this job's.
		{"beside another job", sendcost.CPU{Proc: 1e9, Sent: 10 * mb, Ops: 1e8}, sendcost.CPU{Proc: 2.2e9, Sent: 18 * mb, Ops: 7e8}, 0.3},
		// Counters that went back (a restart): as without them.
		{"restarted", sendcost.CPU{Proc: 1e9, Sent: 10 * mb, Ops: 1e8}, sendcost.CPU{Proc: 1.4e9, Sent: 1 * mb, Ops: 0}, 0.3},
	} {
		got := transportCores([]sendcost.CPU{tc.c0}, []sendcost.CPU{tc.c1}, []probeResult{probe})
		if math.Abs(got[0]-tc.want) > 1e-9 {
			t.Errorf("%s: %v cores, want %v", tc.name, got[0], tc.want)
		}
	}
}
