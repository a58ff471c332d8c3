// Package testutil is what the project's tests share: the module's binaries
// built once per `go test` run, free loopback addresses, a buffer that a
// process may write while the test reads it, an SVG parser for the chart
// tests (ParseSVG), and Require, which skips a test
// whose machine lacks something here and fails it in CI. Only tests import it.
package testutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// EnvBin names a folder holding binaries built beforehand (`make test`
// builds bin/ first and sets it), which Binaries then uses as it is.
const EnvBin = "SOPHON_TEST_BIN"

// Commands are the module's binaries by name, with their package folders
// relative to the module root.
var Commands = map[string]string{
	"storage-agent": "storage-agent",
	"compute-agent": "compute-agent",
	"testbed":       "testbed/cmd/testbed",
	"policy":        "policy/cmd/policy",
	"render":        "deploy/render",
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// Binaries returns a folder holding every binary of Commands. With
// SOPHON_TEST_BIN set it is that folder. Otherwise the binaries are built
// once per `go test` run: the packages' test processes of one run share the
// go command as their parent, so the first of them to take the folder's
// lock builds into os.TempDir()/sophon-testbin-<parent pid> and the others
// find them there. Folders of runs whose go command has gone are removed
// when a later run starts.
func Binaries(tb testing.TB) string {
	tb.Helper()
	binOnce.Do(func() { binDir, binErr = binaries() })
	if binErr != nil {
		tb.Fatal(binErr)
	}
	return binDir
}

// Binary returns the path of one binary of Commands.
func Binary(tb testing.TB, name string) string {
	tb.Helper()
	if _, ok := Commands[name]; !ok {
		tb.Fatalf("testutil: no command %q", name)
	}
	return filepath.Join(Binaries(tb), name)
}

func binaries() (string, error) {
	if dir := os.Getenv(EnvBin); dir != "" {
		for name := range Commands {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return "", fmt.Errorf("testutil: %s=%s lacks %s: %w", EnvBin, dir, name, err)
			}
		}
		return dir, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	removeStale()
	dir := filepath.Join(os.TempDir(), "sophon-testbin-"+strconv.Itoa(os.Getppid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("testutil: lock %s: %w", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	done := filepath.Join(dir, "built")
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("testutil: no go command to build the binaries: %w", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, pkg := range Commands {
		args = append(args, "./"+pkg)
	}
	cmd := exec.Command(goTool, args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testutil: go build: %w\n%s", err, out)
	}
	return dir, os.WriteFile(done, nil, 0o644)
}

// removeStale removes the binary folders of runs whose go command is gone.
func removeStale() {
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), "sophon-testbin-*"))
	for _, d := range old {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "sophon-testbin-"))
		if err != nil || pid == os.Getppid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
}

// ModuleRoot is the folder of the module's go.mod, found upwards from the
// working folder (a package's own folder under go test).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testutil: no go.mod above the working folder")
		}
		dir = parent
	}
}

// FreeAddr returns a loopback TCP address that was free a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers: a
// process's output or a logger's, read while it runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what has been written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns the lines written so far that contain every one of subs
// (e.g. `"level":"warn"` for a logger's warnings).
func (s *SyncBuffer) Lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(s.String(), "\n") {
		if line != "" && all(line, subs) {
			out = append(out, line)
		}
	}
	return out
}

func all(line string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(line, sub) {
			return false
		}
	}
	return true
}

// Len returns how many bytes have been written so far.
func (s *SyncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// LinkBinaries hard-links (or, across file systems, copies) every binary of
// Binaries into dir and returns dir: a test that looks for processes left
// behind by their path then sees only those it started from dir.
func LinkBinaries(tb testing.TB, dir string) string {
	tb.Helper()
	src := Binaries(tb)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for name := range Commands {
		from, to := filepath.Join(src, name), filepath.Join(dir, name)
		if _, err := os.Stat(to); err == nil {
			continue
		}
		if os.Link(from, to) == nil {
			continue
		}
		b, err := os.ReadFile(from)
		if err == nil {
			err = os.WriteFile(to, b, 0o755)
		}
		if err != nil {
			tb.Fatalf("testutil: copy %s: %v", name, err)
		}
	}
	return dir
}

// UnixPair is a connected pair of Unix stream sockets, closed when the test
// ends.
func UnixPair(tb testing.TB) (*net.UnixConn, *net.UnixConn) {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// DuplicateKeys returns the keys that occur more than once in any object
// of the JSON text line (a log line), or an error when line is not JSON.
// encoding/json keeps the last of duplicate keys without a word, and log
// pipelines differ on which one they keep, so a line must not have them.
func DuplicateKeys(line []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	var dups []string
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					dups = append(dups, key)
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // '}'
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ']'
			return err
		}
		return nil
	}
	if err := walk(); err != nil {
		return nil, fmt.Errorf("testutil: log line %q: %w", line, err)
	}
	return dups, nil
}
