package storageagent

import (
	"runtime"
	"runtime/debug"
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
// least one ran since the last release (budget.IdleWatch counts the jobs),
// the agent collects and returns every free page to the OS
// (releaseMemory): once after each burst, never
// while serving steadily or idle. libjpeg's buffers are malloc'd and freed
// within each decode, the large ones mapped and unmapped by glibc; they
// need nothing here (docs/reliability.md, "Memory after a burst").

// releaseMemory is the release of a real agent: two collections, since
// buffers parked in a sync.Pool (gRPC's message buffers, the ops' scratch
// rows) survive the first one in the pool's victim cache, then every free
// page back to the OS.
func releaseMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}
