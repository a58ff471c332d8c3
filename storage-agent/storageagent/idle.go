package storageagent

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// DefaultIdleRelease is how long the agent serves nothing before it hands
// the memory a burst left behind back to the operating system.
const DefaultIdleRelease = 5 * time.Second

// Memory after a burst.
//
// NB: without help the agent's resident set stays many times its idle size
// long after a burst ends. The Go runtime keeps the heap pages a burst
// freed until its background scavenger returns them, and it scavenges only
// down to about the heap goal of the last collection, which the burst
// raised (with the agent's 400% GC target, several times the live heap of a
// burst of large decodes); an idle process is collected only every two
// minutes. So once no job has run for a whole IdleRelease period, and at
// least one ran since the last release, the agent collects and returns
// every free page to the OS (releaseMemory): once after each burst, never
// while serving steadily or idle. libjpeg's buffers are malloc'd and freed
// within each decode, the large ones mapped and unmapped by glibc; they
// need nothing here (docs/reliability.md, "Memory after a burst").

// idleWatch counts the jobs the workers run, so that a periodic check can
// tell an idle agent from a busy one without a clock read per job.
type idleWatch struct {
	active  atomic.Int64  // jobs being handled
	started atomic.Uint64 // jobs ever started
}

// begin and end bracket one job.
func (w *idleWatch) begin() { w.active.Add(1); w.started.Add(1) }
func (w *idleWatch) end()   { w.active.Add(-1) }

// releaseWhenIdle calls release once per burst: at the first tick of every
// (IdleRelease) that finds no job running and none started since the tick
// before, provided a job has started since the last release. So release
// runs between one and two periods after a burst's last job. It returns
// when ctx ends.
func (w *idleWatch) releaseWhenIdle(ctx context.Context, tick <-chan time.Time, release func()) {
	last, dirty := w.started.Load(), false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		n := w.started.Load()
		if n != last || w.active.Load() != 0 {
			last, dirty = n, true
			continue
		}
		if dirty {
			release()
			dirty = false
		}
	}
}

// releaseMemory is the release of a real agent: two collections, since
// buffers parked in a sync.Pool (gRPC's message buffers, the ops' scratch
// rows) survive the first one in the pool's victim cache, then every free
// page back to the OS.
func releaseMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}
