package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"
)

// The tests run the real agents and deploy/render (testutil.Binaries), so
// that every flag a manifest or the batch template passes is checked
// against the binary that will parse it.

func TestMain(m *testing.M) {
	// The Slurm test runs this test binary as a stand-in compute agent.
	if os.Getenv("SOPHON_FAKE_AGENT") == "1" {
		os.Exit(fakeAgent(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// binaries returns the folder of the module's binaries, built once per go
// test run.
func binaries(t *testing.T) string { return testutil.Binaries(t) }

// agentFlag is one flag as the binary's --help lists it.
type agentFlag struct {
	bool    bool   // takes no value
	deflt   string // the default --help prints, if any
	comment string
}

var (
	flagsMu    sync.Mutex
	flagsCache = map[string]map[string]agentFlag{}
	// flagLine is a flag's line in Go's flag.PrintDefaults: "  -name" and,
	// for a flag that takes a value, the value's name.
	flagLine    = regexp.MustCompile(`^  -([a-z0-9][a-z0-9-]*)(?: (\S+))?$`)
	flagDefault = regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
)

// helpFlags returns the flags the program at bin lists in its --help.
func helpFlags(t *testing.T, bin string) map[string]agentFlag {
	t.Helper()
	flagsMu.Lock()
	defer flagsMu.Unlock()
	if f, ok := flagsCache[bin]; ok {
		return f
	}
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", filepath.Base(bin), err, out)
	}
	flags := map[string]agentFlag{}
	lines := strings.Split(string(out), "\n")
	for i, l := range lines {
		m := flagLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		f := agentFlag{bool: m[2] == ""}
		if i+1 < len(lines) {
			f.comment = strings.TrimSpace(lines[i+1])
			if d := flagDefault.FindStringSubmatch(f.comment); d != nil {
				f.deflt = d[1]
			}
		}
		flags[m[1]] = f
	}
	if len(flags) < 10 {
		t.Fatalf("%s --help lists %d flags; cannot read its flags:\n%s", filepath.Base(bin), len(flags), out)
	}
	flagsCache[bin] = flags
	return flags
}

// parseArgs reads a rendered argument list as the agent's flag package
// will: every word a --flag=value, a bool --flag, or a --flag followed by
// its value; no positional arguments (the flag package would stop there
// and ignore the rest). It returns the values by flag name, and whether
// the arguments were well formed.
func parseArgs(t *testing.T, bin string, args []string) (map[string]string, bool) {
	t.Helper()
	known := helpFlags(t, bin)
	got := map[string]string{}
	ok := true
	bad := func(format string, a ...any) {
		t.Helper()
		t.Errorf(format, a...)
		ok = false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			bad("%s: argument %q is not a flag: the agent would stop parsing there", filepath.Base(bin), a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := known[name]
		if !ok {
			bad("%s has no flag --%s (its --help lists %s)", filepath.Base(bin), name, strings.Join(sortedKeys(known), ", "))
			continue
		}
		if !hasValue && !f.bool {
			if i+1 == len(args) {
				bad("%s: --%s needs a value", filepath.Base(bin), name)
				continue
			}
			i++
			value = args[i]
		}
		if hasValue && f.bool && value != "true" && value != "false" {
			bad("%s: bool flag --%s=%q", filepath.Base(bin), name, value)
		}
		if _, dup := got[name]; dup {
			bad("%s: --%s given twice", filepath.Base(bin), name)
		}
		got[name] = value
	}
	return got, ok
}

// agentArgs checks args against the agent at bin, first by its --help and
// then by the binary's own parse (checkArgs), and returns them by name.
func agentArgs(t *testing.T, bin string, args []string) map[string]string {
	t.Helper()
	flags, ok := parseArgs(t, bin, args)
	if ok {
		checkArgs(t, bin, args) // never with a positional argument: it would start the agent
	}
	return flags
}

// checkArgs runs the binary with args and --help at the end: its flag
// package parses every flag and value in order (an unknown flag or a value
// of the wrong type exits 2) before it meets --help and exits 0. Nothing
// is started.
func checkArgs(t *testing.T, bin string, args []string) {
	t.Helper()
	cmd := exec.Command(bin, append(append([]string{}, args...), "--help")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			first, _, _ := strings.Cut(out.String(), "\n")
			t.Errorf("%s %s --help: %v: %s", filepath.Base(bin), strings.Join(args, " "), err, first)
		} else if !strings.HasPrefix(out.String(), "Usage: "+filepath.Base(bin)) {
			t.Errorf("%s with --help last printed no usage; did it run?\n%s", filepath.Base(bin), out.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Errorf("%s %s --help did not exit: it must have started", filepath.Base(bin), strings.Join(args, " "))
	}
}

// envRef is Kubernetes' $(VAR) reference in a container's args.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) as the kubelet does, from env; a reference to a
// variable env lacks is an error (the kubelet would pass it on verbatim).
func expand(t *testing.T, args []string, env map[string]string) []string {
	t.Helper()
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			v, ok := env[name]
			if !ok {
				t.Errorf("argument %q refers to $(%s), which the container's env does not define", a, name)
			}
			return v
		})
	}
	return out
}
