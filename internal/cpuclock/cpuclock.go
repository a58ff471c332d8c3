// Package cpuclock reads the calling thread's CPU clock, which both agents
// and the profiler use to charge a sample exactly the CPU it took: reading,
// decoding (cgo included) and encoding, not time spent descheduled or
// blocked. Callers lock their goroutine to its thread
// (runtime.LockOSThread) around what they measure.
package cpuclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// Thread is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), or 0
// when the clock cannot be read.
func Thread() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Process is the calling process's CPU time, every thread together
// (CLOCK_PROCESS_CPUTIME_ID), or 0 when the clock cannot be read.
func Process() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
