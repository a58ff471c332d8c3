package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

const hogUsage = `testbed hog: burn CPU on purpose, for testbed run --contend-at.

Busy-spins --threads goroutines, each locked to its own OS thread, until
SIGTERM or SIGINT, or until its parent dies (PR_SET_PDEATHSIG), and then
exits 0. With --gate it first waits for a line on stdin, so that its parent
can move it into a cgroup before it spins; stdin closing (before or after
the line) stops it too, so it never outlives the process that feeds it.

Examples:
  testbed hog --threads 2
  echo go | testbed hog --gate

Flags:
`

// errHogParentGone: the hog's parent died before it could start.
var errHogParentGone = errors.New("hog: parent gone")

func runHog(ctx context.Context, args []string, log zerolog.Logger) error {
	fs := flag.NewFlagSet("hog", flag.ContinueOnError)
	threads := fs.Int("threads", 1, "busy `threads`, each locked to an OS thread")
	gate := fs.Bool("gate", false, "wait for a line on stdin before spinning; stop when stdin closes")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), hogUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("hog: unexpected arguments %q", fs.Args())
	}
	if *threads < 1 {
		return fmt.Errorf("hog: --threads %d: want at least 1", *threads)
	}
	// The kernel sends SIGKILL when the parent dies from now on; a parent
	// that died before this call left us to the reaper (pid 1, or a
	// subreaper that a gated caller's closed stdin gives away).
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("hog: prctl: %w", err)
	}
	if os.Getppid() == 1 {
		return errHogParentGone
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *gate {
		opened := make(chan error, 1)
		go func() {
			// NB: not owned: it blocks in read(2) until stdin closes or the
			// process ends.
			in := bufio.NewReader(os.Stdin)
			_, err := in.ReadString('\n')
			opened <- err
			if err == nil {
				_, _ = io.Copy(io.Discard, in)
			}
			cancel()
		}()
		select {
		case <-ctx.Done():
			return nil // SIGTERM or SIGINT before the gate opened
		case err := <-opened:
			if errors.Is(err, io.EOF) {
				return nil // the parent gave up before the gate opened
			}
			if err != nil {
				return fmt.Errorf("hog: stdin: %w", err)
			}
		}
	}
	log.Debug().Int("threads", *threads).Msg("hog spinning")
	spin(ctx, *threads)
	return nil
}

// sink keeps the spin loop's arithmetic from being optimized away.
var sink atomic.Uint64

// spin busy-loops on threads OS threads until ctx ends.
func spin(ctx context.Context, threads int) {
	// Locked goroutines still need a P to run: one each, and one for the
	// signal handling and ctx.
	if runtime.GOMAXPROCS(0) < threads+1 {
		runtime.GOMAXPROCS(threads + 1)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range threads {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			x := uint64(i) + 1
			for !stop.Load() {
				for range 1 << 14 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			sink.Add(x)
		})
	}
	<-ctx.Done()
	stop.Store(true)
	wg.Wait()
}
