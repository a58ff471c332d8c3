package dataset_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

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
				t.Skip("SKIP: running as root, which reads any file: the unreadable case cannot be built")
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
