// Package s3gw runs a real S3-compatible server for the tests and the
// testbed: versitygw's POSIX gateway (github.com/versity/versitygw), whose
// buckets are the folders of a root directory and whose objects are the
// files below them. `make s3gw` (and .ci/run) installs it with go install.
package s3gw

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Binary is the server's command; Package and Version what installs it.
const (
	Binary  = "versitygw"
	Package = "github.com/versity/versitygw/cmd/versitygw"
	Version = "v1.8.0"
)

// ErrMissing: the server's binary is neither on PATH nor in $(go env
// GOPATH)/bin.
var ErrMissing = errors.New("s3gw: versitygw not found (make s3gw: go install " + Package + "@" + Version + ")")

// Find returns the server binary's path: on PATH, else in GOPATH/bin
// (where go install puts it).
func Find() (string, error) {
	if p, err := exec.LookPath(Binary); err == nil {
		return p, nil
	}
	var dirs []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		dirs = append(dirs, filepath.SplitList(gp)...)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		dirs = append(dirs, filepath.SplitList(strings.TrimSpace(string(out)))...)
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "bin", Binary)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrMissing
}

// Config configures a server.
type Config struct {
	// Root is the directory whose folders are the buckets. Required.
	Root string
	// Addr is the listen address. Empty means 127.0.0.1 and a free port.
	Addr string
	// Access and Secret are the root account's keys. Required.
	Access, Secret string
	// Region is the server's region. Empty means us-east-1.
	Region string
	// Wrap, when set, wraps the command (for example to run it in a
	// network namespace: ip netns exec NS).
	Wrap []string
	// Log receives the server's output. Nil discards it.
	Log *os.File
}

// Server is a running server.
type Server struct {
	// URL is the endpoint, http://host:port.
	URL string
	cmd *exec.Cmd
	ch  chan error
}

// Start runs the server and waits until it accepts connections; Close
// stops it.
func Start(ctx context.Context, c Config) (*Server, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	addr := c.Addr
	if addr == "" {
		if addr, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	args := append(append(append([]string{}, c.Wrap...), bin), Args(c.Root, addr, c.Access, c.Secret, c.Region)...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = c.Log, c.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3gw: start %s: %w", bin, err)
	}
	s := &Server{URL: "http://" + addr, cmd: cmd, ch: make(chan error, 1)}
	go func() { s.ch <- cmd.Wait() }()
	if err := s.wait(ctx, addr, c.Wrap); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Args are the server's arguments: the POSIX gateway over root, listening
// on addr, with the root account's keys; an empty region is us-east-1.
func Args(root, addr, access, secret, region string) []string {
	if region == "" {
		region = "us-east-1"
	}
	return []string{"--access", access, "--secret", secret, "--region", region, "--port", addr, "--quiet", "posix", root}
}

// wait polls addr until it accepts a connection, the server exits, or 20 s
// pass. With Wrap the address is in another namespace: it waits for the
// namespace's port through the same wrapper.
func (s *Server) wait(ctx context.Context, addr string, wrap []string) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.ch:
			s.ch <- err
			return fmt.Errorf("s3gw: server exited before listening: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if len(wrap) > 0 {
			probe := append(append([]string{}, wrap...), "bash", "-c", "exec 3<>/dev/tcp/"+strings.Replace(addr, ":", "/", 1))
			if exec.Command(probe[0], probe[1:]...).Run() == nil {
				return nil
			}
			continue
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("s3gw: server not listening on %s after 20 s", addr)
}

// Close stops the server (its whole process group) and waits for it. It
// is safe to call twice.
func (s *Server) Close() {
	if s.cmd.Process == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	err := <-s.ch
	s.ch <- err
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
