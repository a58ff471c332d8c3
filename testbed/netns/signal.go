package netns

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// RemoveOnSignal watches for SIGINT and SIGTERM until stop is called: on
// either it removes everything named with prefix (see Remove), runs also
// (more cleanup, e.g. scratch files), then exits with status 130 (SIGINT)
// or 143 (SIGTERM). Tests and commands that set up
// pairs call it first, so Ctrl-C leaves nothing behind; processes started
// with Pair.Command die with this one (Pdeathsig).
func RemoveOnSignal(prefix string, also ...func()) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case s := <-sig:
			if err := Remove(prefix); err != nil {
				fmt.Fprintf(os.Stderr, "netns: cleaning up after %v: %v\n", s, err)
			}
			for _, f := range also {
				f()
			}
			code := 130
			if s == syscall.SIGTERM {
				code = 143
			}
			os.Exit(code)
		case <-quit:
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(sig)
			close(quit)
			wg.Wait()
		})
	}
}
