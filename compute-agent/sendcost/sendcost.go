// Package sendcost is what sending costs a storage agent beyond the ops it
// runs for the samples (its transport: gRPC, TLS, copies and syscalls),
// from two of its Info answers: its process CPU and, from an agent that
// counts them, the payload bytes and the ops' CPU of every response it
// sent to any job (InfoResponse.process_cpu_ns, sent_bytes,
// sent_ops_cpu_ns). Stage 1 prices its link probe's samples with it, and
// the engine measures each epoch's over its agents (PerByte:
// report.EpochReport.StorageNSPerByte), by the one rule (Spent).
package sendcost

import (
	"context"
	"time"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// MinBytes is the least a job must have received from a storage agent
// for what sending them cost it to be measured: fewer do not tell.
const MinBytes = 1 << 20

// CPU is what a storage agent's Info says of its CPU: its process CPU
// (ns; 0: not reported) and, from an agent that counts them, the payload
// bytes and the ops' CPU (ns) of every response it sent to any job.
type CPU struct{ Proc, Sent, Ops uint64 }

// Of is the CPU info reports.
func Of(info *dataplanepb.InfoResponse) CPU {
	return CPU{info.GetProcessCpuNs(), info.GetSentBytes(), info.GetSentOpsCpuNs()}
}

// Read asks client's Info for the agent's CPU, within timeout; false
// when it does not answer.
func Read(ctx context.Context, client dataplanepb.StorageClient, timeout time.Duration) (CPU, bool) {
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := client.Info(ictx, &dataplanepb.InfoRequest{})
	if err != nil {
		return CPU{}, false
	}
	return Of(info), true
}

// Spent is the CPU (ns) a storage agent spent beyond the ops sending got
// bytes to this job between its readings a and b, ops being the CPU this
// job's responses reported for their ops meanwhile. An agent that counts
// what it sent to every job (and sent at least got bytes meanwhile) may
// have served other jobs: it is its process CPU beyond every job's ops,
// in the proportion of got to all it sent. Otherwise its process CPU
// beyond ops, which errs high when it served others. False when a has no
// process CPU or b's went back (a restart).
func Spent(a, b CPU, got, ops int64) (float64, bool) {
	if a.Proc == 0 || b.Proc < a.Proc {
		return 0, false
	}
	proc := float64(b.Proc - a.Proc)
	if sent := b.Sent - a.Sent; b.Sent >= a.Sent && sent >= uint64(got) && b.Ops >= a.Ops {
		return max(proc-float64(b.Ops-a.Ops), 0) / float64(sent) * float64(got), true
	}
	return max(proc-float64(ops), 0), true
}

// Agent is one storage agent's part in a job's measurement (PerByte):
// its client, its CPU at the start (Of its Info then), and the bytes it
// sent the job and the CPU (ns) the ops of those responses took since.
type Agent struct {
	Client   dataplanepb.StorageClient
	Start    CPU
	Got, Ops int64
	// Timeout bounds its Info call now.
	Timeout time.Duration
}

// PerByte is what sending cost the agents beyond their ops since their
// Start, summed (Spent, from their Info now), over the bytes they sent.
// Agents that report no process CPU, sent nothing or do not answer within
// their Timeout are left out; 0 when none is left or too few bytes
// crossed (MinBytes).
func PerByte(ctx context.Context, agents []Agent) float64 {
	var ns, bytes float64
	for _, a := range agents {
		if a.Start.Proc == 0 || a.Got == 0 {
			continue
		}
		now, ok := Read(ctx, a.Client, a.Timeout)
		spent, known := Spent(a.Start, now, a.Got, a.Ops)
		if ok && known {
			ns += spent
			bytes += float64(a.Got)
		}
	}
	if bytes < MinBytes {
		return 0
	}
	return ns / bytes
}
