package storageagent

import (
	"runtime"
	"time"

	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
)

// Read-ahead for datasets in an object store (dataset.Dataset.Remote).
//
// Reading a sample from a bucket is a network round trip (a ranged GET),
// where a local file is a page-cache copy; a budgeted worker that read its
// job's sample and then ran its ops would leave its core idle for every
// round trip, and the agent would serve, and measure, less than its
// budget. So a worker of such a dataset takes the next queued job as it
// starts one (when one is queued: at most one job ahead per worker) and
// reads that job's sample in the background meanwhile. The read's thread
// CPU time (the client's request, the content hash) is charged to the job
// that uses it, so the CPU budget is unchanged; only the wait is hidden.

// readAhead is one job's sample being read.
type readAhead struct {
	done chan struct{} // closed when raw, err and busy are set
	raw  []byte
	err  error
	busy time.Duration
}

// readNext takes the next queued job, if there is one, and starts reading
// its sample when its processing reads one (an offload: raw fetches read
// straight into their wire form on the raw pool).
func (s *server) readNext() *job {
	j, ok := s.queue.TryNext()
	if !ok || isRaw(j.req) || j.served == dataplanepb.Served_SERVED_RAW_CONTENDED || j.st.ctx.Err() != nil {
		return j
	}
	pre := &readAhead{done: make(chan struct{})}
	j.pre = pre
	i := j.req.GetSample()
	go func() { // the worker that took j waits for it (job.waitRead)
		defer close(pre.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t0 := cpuclock.Thread()
		pre.raw, pre.err = s.ds.Read(i)
		pre.busy = cpuclock.Thread() - t0
	}()
	return j
}

// read returns the job's sample: the bytes read ahead, waiting for them,
// or read now.
func (j *job) read(ds *dataset.Dataset) ([]byte, error) {
	if j.pre == nil {
		return ds.Read(j.req.GetSample())
	}
	<-j.pre.done
	return j.pre.raw, j.pre.err
}

// waitRead waits for the job's read-ahead, if any, to end.
func (j *job) waitRead() {
	if j.pre != nil {
		<-j.pre.done
	}
}
