package stage1

import (
	"math"
	"testing"
	"time"
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
		c0, c1 agentCPU
		want   float64
	}{
		// Alone, an agent before the counters: 400 ms of process CPU, 100
		// of it this probe's ops: 0.3 cores.
		{"no counters", agentCPU{proc: 1e9}, agentCPU{proc: 1.4e9}, 0.3},
		// Alone, with counters: the same.
		{"alone", agentCPU{1e9, 10 * mb, 1e8}, agentCPU{1.4e9, 14 * mb, 2e8}, 0.3},
		// Another job got as many bytes and ran 500 ms of ops meanwhile:
		// 1.2 s of process CPU, 600 ms of it ops, half the rest this job's.
		{"beside another job", agentCPU{1e9, 10 * mb, 1e8}, agentCPU{2.2e9, 18 * mb, 7e8}, 0.3},
		// Counters that went back (a restart): as without them.
		{"restarted", agentCPU{1e9, 10 * mb, 1e8}, agentCPU{1.4e9, 1 * mb, 0}, 0.3},
	} {
		got := transportCores([]agentCPU{tc.c0}, []agentCPU{tc.c1}, []probeResult{probe})
		if math.Abs(got[0]-tc.want) > 1e-9 {
			t.Errorf("%s: %v cores, want %v", tc.name, got[0], tc.want)
		}
	}
}
