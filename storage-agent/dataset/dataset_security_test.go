package dataset_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

func TestDatasetHostileEntries(t *testing.T) {
	cases := datasettest.Cases()
	if len(cases) < 30 {
		t.Fatalf("%d cases, want at least 30", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			if tc.NeedUser && os.Geteuid() == 0 {
				runUnprivileged(t)
				return
			}
			layout := tc.Layout
			if layout == "" {
				layout = "folder"
			}
			e := datasettest.NewEnv(t, layout)
			if tc.Build != nil {
				tc.Build(t, e)
			}
			done := make(chan struct{})
			var d *dataset.Dataset
			var err error
			go func() {
				defer close(done)
				d, err = dataset.OpenWith(e.Dir, dataset.OpenOptions{Index: "-"})
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Open blocked")
			}
			if err != nil {
				t.Fatalf("lenient Open: %v", err)
			}
			defer d.Close()
			st := d.Stats()
			if tc.Skip != "" && st.Skipped[tc.Skip] == 0 {
				t.Errorf("skipped %v, want a %s", d.Skipped(), tc.Skip)
			}
			if tc.Skip == "" && len(d.Skipped()) != 0 {
				t.Errorf("skipped %v, want none", d.Skipped())
			}
			for _, s := range d.Skipped() {
				if !strings.Contains(s.String(), string(s.Reason)) || s.Path == "" {
					t.Errorf("skip %v does not name its entry and reason", s)
				}
			}
			paths := map[string]uint64{}
			for i := range d.Len() {
				paths[d.Path(i)] = i
			}
			for _, w := range tc.Want {
				if _, ok := paths[w]; !ok {
					t.Errorf("%q not served; catalog %v", w, keys(paths))
				}
			}
			for _, c := range d.ClassNames() {
				if !isProtoString(c) {
					t.Errorf("class name %q is not valid UTF-8", c)
				}
			}
			sd, serr := dataset.OpenWith(e.Dir, dataset.OpenOptions{Strict: true, Index: "-"})
			if serr == nil {
				sd.Close()
			}
			if (serr != nil) != (tc.Skip != "") || (serr != nil && !errors.Is(serr, dataset.ErrLayout)) {
				t.Errorf("strict Open: %v; want ErrLayout exactly when an entry is bad", serr)
			}
			broken := uint64(1 << 62)
			if tc.After != nil {
				i, ok := paths[tc.Path]
				if !ok {
					t.Fatalf("%s not in the catalog", tc.Path)
				}
				tc.After(t, e)
				broken = i
			}
			readAll(t, d, broken, tc.Path, tc.ReadErr)
		})
	}
}

// readAll reads every sample: none may hold the canary; sample broken must
// fail with want, naming itself and path; the others must read.
func readAll(t *testing.T, d *dataset.Dataset, broken uint64, path string, want error) {
	t.Helper()
	for i := range d.Len() {
		done := make(chan struct{})
		var b []byte
		var err error
		go func() {
			defer close(done)
			b, err = d.Read(i)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Read(%d) blocked", i)
		}
		if bytes.Contains(b, []byte(datasettest.CanaryMark)) {
			t.Fatalf("Read(%d) (%s) returned the canary", i, d.Path(i))
		}
		if i == broken {
			if !errors.Is(err, want) || !errors.Is(err, dataset.ErrRead) {
				t.Errorf("Read(%d) = %v, want ErrRead and %v", i, err, want)
			} else if msg := err.Error(); !strings.HasPrefix(msg, "sample ") || !strings.Contains(msg, path) || !isProtoString(msg) {
				t.Errorf("Read(%d) error %q does not name the sample and %s", i, msg, path)
			}
			continue
		}
		if err != nil {
			t.Errorf("Read(%d) (%s): %v", i, d.Path(i), err)
		}
	}
}

func isProtoString(s string) bool { return strings.ToValidUTF8(s, "") == s }

func keys(m map[string]uint64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// unprivilegedEnv marks the copy of the test binary that runUnprivileged
// starts.
const unprivilegedEnv = "SOPHON_TEST_UNPRIVILEGED"

// runUnprivileged runs test t again in a copy of this test binary as user
// and group 65534 (nobody) without supplementary groups, through util-linux's
// setpriv, and fails t unless it passed there. Root reads any file (the
// capability CAP_DAC_OVERRIDE), so a case that needs an unreadable file
// cannot be built as root; CI runs as root, and this keeps such cases
// gating there. Giving up uid 0 drops every capability.
func runUnprivileged(t *testing.T) {
	t.Helper()
	if os.Getenv(unprivilegedEnv) != "" {
		t.Fatalf("still uid %d in the unprivileged run", os.Geteuid())
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.Require(t, "running as root and setpriv (util-linux) is missing: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The go tool's build folder is root's alone: nobody runs a link to
	// the binary from a folder it may enter.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(self))
	if err := os.Link(self, bin); err != nil {
		data, rerr := os.ReadFile(self)
		if rerr != nil {
			t.Fatalf("link %v; read %v", err, rerr)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.CommandContext(t.Context(), setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		bin, "-test.run="+strings.Join(parts, "/"), "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), unprivilegedEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")) {
		t.Fatalf("as nobody (setpriv): %v, want a pass of %s:\n%s", err, t.Name(), out)
	}
	t.Logf("passed as nobody (setpriv --reuid=65534)")
}
