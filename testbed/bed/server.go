package bed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Errors of the servers a bed starts.
var (
	// ErrExited: a server exited before it was ready.
	ErrExited = errors.New("bed: server exited")
	// ErrNotReady: a server was not ready within readyWait.
	ErrNotReady = errors.New("bed: server not ready")
)

// readyWait bounds how long StartDaemon waits for a server to be ready.
const readyWait = 30 * time.Second

// Server is a background process on a node (a storage agent, the peer's
// file server, the trainer row's compute agent).
type Server struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
	once sync.Once
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop ends the server: SIGTERM, then SIGKILL to its group after 5 s. It
// returns the server's exit error, nil when it exited 0. Safe twice.
func (s *Server) Stop() error {
	s.once.Do(func() {
		Terminate(s.cmd, s.done)
		s.log.Close()
	})
	return s.err
}

// Terminate ends cmd, a started process leading its own process group:
// SIGTERM, then SIGKILL to the group after 5 s. done is closed once
// cmd.Wait returned; Terminate returns after that.
func Terminate(cmd *exec.Cmd, done <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// StartServer starts a server on node h, places it in that node's cgroup
// and waits until addr answers (dialled from the first compute node). The
// server is stopped by Close (SIGTERM, then SIGKILL to its group), or
// sooner by its Stop.
func (b *Bed) StartServer(ctx context.Context, h Host, logPath, addr string, name string, args ...string) (*Server, error) {
	ready := func(ctx context.Context) error {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := b.Dial(dctx, addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	return b.StartDaemon(ctx, h, logPath, "listening on "+addr, ready, name, args...)
}

// StartDaemon starts a server on node h, its stdout and stderr to logPath,
// places it in that node's cgroup and waits until ready returns nil (for
// at most 30 s; what names what it waits for, for the error). The server
// is stopped by Close, or sooner by its Stop.
func (b *Bed) StartDaemon(ctx context.Context, h Host, logPath, what string, ready func(context.Context) error, name string, args ...string) (*Server, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := b.Command(ctx, h, name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	s := &Server{cmd: cmd, log: f, done: make(chan struct{})}
	go func() { // owned by s: Stop waits for it
		s.err = cmd.Wait()
		close(s.done)
	}()
	b.AtClose(func() error {
		s.Stop()
		return nil
	})
	if err := b.Place(h, cmd.Process.Pid); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(readyWait)
	for {
		err := ready(ctx)
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%w: %s: %v (log: %s)%s", ErrExited, filepath.Base(name), s.err, logPath, Tail(logPath))
		case <-ctx.Done():
			return nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s not %s after 30 s: %v (log: %s)", ErrNotReady, filepath.Base(name), what, err, logPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Tail is ": " and the last line of a log, for error messages; "" when
// the log is unreadable or empty.
func Tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) == 0 || lines[len(lines)-1] == "" {
		return ""
	}
	return ": " + lines[len(lines)-1]
}

// ProcCPU is a process's user and system time so far, all its threads,
// from /proc/PID/stat (in clock ticks, 10 ms); 0 when unreadable.
func ProcCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ... utime(14) stime(15); comm may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	const userHZ = 100 // sysconf(_SC_CLK_TCK) on Linux
	return time.Duration(utime+stime) * time.Second / userHZ
}
