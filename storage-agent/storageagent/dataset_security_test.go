package storageagent

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// canaryMark is in every file outside the data directory that a symlink
// points to: no read may ever return it.
const canaryMark = "CANARY-7f3a"

// secEnv is one case's world: the data directory and, outside it, a canary
// file, a folder holding a canary JPEG and a canary tar.
type secEnv struct {
	dir, outside, canary string
	img                  []byte // a good sample's bytes (good/a.jpg, good.tar's a.jpg)
}

func newSecEnv(t *testing.T, layout string) *secEnv {
	e := &secEnv{dir: t.TempDir(), outside: t.TempDir(), img: testJPEG(t, 1)}
	e.canary = filepath.Join(e.outside, "canary.jpg")
	// As long as good/a.jpg, so a swap keeps the size.
	writeFile(t, e.canary, append([]byte(canaryMark), bytes.Repeat([]byte{'C'}, len(e.img)-len(canaryMark))...))
	writeFile(t, filepath.Join(e.outside, "cls", "secret.jpg"), []byte(canaryMark))
	writeTar(t, filepath.Join(e.outside, "evil.tar"), []tarMember{{"evil.jpg", []byte(canaryMark)}})
	if layout == "tar" {
		writeTar(t, filepath.Join(e.dir, "good.tar"), []tarMember{{"k/a.jpg", e.img}, {"k/b.jpg", testJPEG(t, 2)}})
	} else {
		writeFile(t, filepath.Join(e.dir, "good", "a.jpg"), e.img)
		writeFile(t, filepath.Join(e.dir, "good", "b.jpg"), testJPEG(t, 2))
	}
	return e
}

func (e *secEnv) p(rel string) string { return filepath.Join(e.dir, filepath.FromSlash(rel)) }

func mustT(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, name string) {
	t.Helper()
	mustT(t, os.MkdirAll(filepath.Dir(name), 0o755))
	mustT(t, os.Symlink(target, name))
}

// secCase builds one hostile entry. Without after, Open (lenient) must
// start, count skip (when set) and serve want; strict Open must refuse
// exactly when skip is set. With after, the entry changes after Open and
// reading sample path must fail with readErr.
type secCase struct {
	name     string
	layout   string // "folder" (default) or "tar"
	build    func(t *testing.T, e *secEnv)
	skip     SkipReason
	want     []string // Path()s that must be served
	after    func(t *testing.T, e *secEnv)
	path     string // the sample after breaks
	readErr  error
	needUser bool // a non-root user (root reads anything)
}

func secCases() []secCase {
	return []secCase{
		{name: "file symlink to canary outside", build: func(t *testing.T, e *secEnv) { symlink(t, e.canary, e.p("good/evil.jpg")) }, skip: SkipEscape},
		{name: "file symlink to /etc/passwd", build: func(t *testing.T, e *secEnv) { symlink(t, "/etc/passwd", e.p("good/passwd.jpg")) }, skip: SkipEscape},
		{name: "relative symlink climbing out", build: func(t *testing.T, e *secEnv) {
			rel, err := filepath.Rel(e.p("good"), e.canary)
			mustT(t, err)
			symlink(t, rel, e.p("good/up.jpg"))
		}, skip: SkipEscape},
		{name: "symlink to ..", build: func(t *testing.T, e *secEnv) { symlink(t, "..", e.p("good/dotdot.jpg")) }, skip: SkipNotRegular},
		{name: "symlink to ../..", build: func(t *testing.T, e *secEnv) { symlink(t, "../..", e.p("good/dotdot2.jpg")) }, skip: SkipEscape},
		{name: "dangling symlink", build: func(t *testing.T, e *secEnv) { symlink(t, "nope.jpg", e.p("good/dangling.jpg")) }, skip: SkipDangling},
		{name: "symlink loop of two", build: func(t *testing.T, e *secEnv) {
			symlink(t, "l2.jpg", e.p("good/l1.jpg"))
			symlink(t, "l1.jpg", e.p("good/l2.jpg"))
		}, skip: SkipLoop},
		{name: "symlink to itself", build: func(t *testing.T, e *secEnv) { symlink(t, "self.jpg", e.p("good/self.jpg")) }, skip: SkipLoop},
		{name: "absolute symlink into the root", build: func(t *testing.T, e *secEnv) { symlink(t, e.p("good/a.jpg"), e.p("good/abs.jpg")) }, skip: SkipEscape},
		{name: "class dir symlink outside", build: func(t *testing.T, e *secEnv) { symlink(t, filepath.Join(e.outside, "cls"), e.p("evil")) }, skip: SkipEscape},
		{name: "class dir symlink to /etc", build: func(t *testing.T, e *secEnv) { symlink(t, "/etc", e.p("etc")) }, skip: SkipEscape},
		{name: "class dir symlink dangling", build: func(t *testing.T, e *secEnv) { symlink(t, "gone", e.p("gone-class")) }, skip: SkipDangling},
		{name: "class dir symlink loop", build: func(t *testing.T, e *secEnv) { symlink(t, "loopy", e.p("loopy")) }, skip: SkipLoop},
		{name: "class dir symlink inside (allowed)", build: func(t *testing.T, e *secEnv) { symlink(t, "good", e.p("alias")) },
			want: []string{"alias/a.jpg", "good/a.jpg"}},
		{name: "file symlink inside (allowed)", build: func(t *testing.T, e *secEnv) { symlink(t, "a.jpg", e.p("good/link.jpg")) },
			want: []string{"good/link.jpg"}},
		{name: "subdir symlink outside not walked", build: func(t *testing.T, e *secEnv) { symlink(t, filepath.Join(e.outside, "cls"), e.p("good/sub")) },
			want: []string{"good/a.jpg"}},
		{name: "subdir symlink to .. not walked", build: func(t *testing.T, e *secEnv) { symlink(t, "..", e.p("good/up")) },
			want: []string{"good/a.jpg"}},
		{name: "non-UTF-8 file name", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("good/\xff\xfe.jpg"), e.img) },
			want: []string{`"good/\xff\xfe.jpg"`}},
		{name: "non-UTF-8 class name", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("cl\xe9/x.jpg"), e.img) },
			want: []string{`"cl\xe9/x.jpg"`}},
		{name: "newline in name", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("good/a\nb.jpg"), e.img) },
			want: []string{`"good/a\nb.jpg"`}},
		{name: "spaces in name", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("good/ a b .jpg"), e.img) },
			want: []string{"good/ a b .jpg"}},
		{name: "leading dash", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("-rf/--help.jpg"), e.img) },
			want: []string{"-rf/--help.jpg"}},
		{name: "very long name", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("good/"+strings.Repeat("n", 250)+".jpg"), e.img) },
			want: []string{"good/" + strings.Repeat("n", 250) + ".jpg"}},
		{name: "deep path", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("good/"+strings.Repeat("d/", 60)+"x.jpg"), e.img) },
			want: []string{"good/" + strings.Repeat("d/", 60) + "x.jpg"}},
		{name: "fifo named x.jpg", build: func(t *testing.T, e *secEnv) { mustT(t, unix.Mkfifo(e.p("good/fifo.jpg"), 0o644)) }, skip: SkipNotRegular},
		{name: "directory named x.jpg", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("good/dir.jpg/in.jpg"), e.img) },
			want: []string{"good/dir.jpg/in.jpg"}},
		{name: "symlink x.jpg to a directory inside", build: func(t *testing.T, e *secEnv) { symlink(t, ".", e.p("good/cur.jpg")) }, skip: SkipNotRegular},
		{name: "unreadable file", needUser: true, build: func(t *testing.T, e *secEnv) {
			writeFile(t, e.p("good/locked.jpg"), e.img)
			mustT(t, os.Chmod(e.p("good/locked.jpg"), 0))
		}, skip: SkipUnreadable},
		{name: "unreadable folder", needUser: true, build: func(t *testing.T, e *secEnv) {
			writeFile(t, e.p("good/locked/x.jpg"), e.img)
			mustT(t, os.Chmod(e.p("good/locked"), 0))
			t.Cleanup(func() { os.Chmod(e.p("good/locked"), 0o755) })
		}, skip: SkipUnreadable},
		{name: "index file symlinked to canary", build: func(t *testing.T, e *secEnv) { symlink(t, e.canary, e.p(indexName)) },
			want: []string{"good/a.jpg"}},
		// Changed after indexing: the read fails, the agent goes on.
		{name: "swapped for symlink to canary", path: "good/a.jpg", readErr: ErrRead, after: func(t *testing.T, e *secEnv) {
			mustT(t, os.Remove(e.p("good/a.jpg")))
			symlink(t, e.canary, e.p("good/a.jpg"))
		}},
		{name: "swapped for symlink inside", path: "good/a.jpg", readErr: ErrChanged, after: func(t *testing.T, e *secEnv) {
			writeFile(t, e.p("good/other.dat"), e.img)
			mustT(t, os.Remove(e.p("good/a.jpg")))
			symlink(t, "other.dat", e.p("good/a.jpg"))
		}},
		{name: "replaced by another inode", path: "good/a.jpg", readErr: ErrChanged, after: func(t *testing.T, e *secEnv) {
			writeFile(t, e.p("good/new.tmp"), bytes.Repeat([]byte{'x'}, len(e.img)))
			mustT(t, os.Rename(e.p("good/new.tmp"), e.p("good/a.jpg")))
		}},
		{name: "truncated", path: "good/a.jpg", readErr: ErrChanged, after: func(t *testing.T, e *secEnv) {
			mustT(t, os.Truncate(e.p("good/a.jpg"), 10))
		}},
		{name: "removed", path: "good/a.jpg", readErr: fs.ErrNotExist, after: func(t *testing.T, e *secEnv) {
			mustT(t, os.Remove(e.p("good/a.jpg")))
		}},
		{name: "replaced by fifo", path: "good/a.jpg", readErr: ErrChanged, after: func(t *testing.T, e *secEnv) {
			mustT(t, os.Remove(e.p("good/a.jpg")))
			mustT(t, unix.Mkfifo(e.p("good/a.jpg"), 0o644))
		}},
		{name: "replaced by directory", path: "good/a.jpg", readErr: ErrChanged, after: func(t *testing.T, e *secEnv) {
			mustT(t, os.Remove(e.p("good/a.jpg")))
			mustT(t, os.Mkdir(e.p("good/a.jpg"), 0o755))
		}},
		// Shards.
		{name: "cut shard", layout: "tar", build: func(t *testing.T, e *secEnv) {
			writeTar(t, e.p("z.tar"), []tarMember{{"k/x.jpg", e.img}, {"k/y.jpg", testJPEG(t, 3)}})
			b, err := os.ReadFile(e.p("z.tar"))
			mustT(t, err)
			mustT(t, os.WriteFile(e.p("z.tar"), b[:len(b)-1024-512-100], 0o644))
		}, skip: SkipCutShard, want: []string{"good.tar/k/a.jpg", "z.tar/k/x.jpg"}},
		{name: "non-tar .tar", layout: "tar", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("junk.tar"), bytes.Repeat([]byte{7}, 3000)) },
			skip: SkipBadShard, want: []string{"good.tar/k/a.jpg"}},
		{name: "empty .tar", layout: "tar", build: func(t *testing.T, e *secEnv) { writeFile(t, e.p("empty.tar"), nil) },
			want: []string{"good.tar/k/a.jpg"}},
		{name: "duplicate keys in shard", layout: "tar", build: func(t *testing.T, e *secEnv) {
			writeTar(t, e.p("dup.tar"), []tarMember{{"k/x.jpg", e.img}, {"k/x.jpeg", []byte("second")}})
		}, skip: SkipDuplicate, want: []string{"dup.tar/k/x.jpg"}},
		{name: "shard symlink outside", layout: "tar", build: func(t *testing.T, e *secEnv) { symlink(t, filepath.Join(e.outside, "evil.tar"), e.p("evil.tar")) },
			skip: SkipEscape},
		{name: "shard symlink dangling", layout: "tar", build: func(t *testing.T, e *secEnv) { symlink(t, "gone.tar", e.p("x.tar")) }, skip: SkipDangling},
		{name: "fifo named .tar", layout: "tar", build: func(t *testing.T, e *secEnv) { mustT(t, unix.Mkfifo(e.p("fifo.tar"), 0o644)) }, skip: SkipNotRegular},
		{name: "shard member with non-UTF-8 name", layout: "tar", build: func(t *testing.T, e *secEnv) {
			writeTar(t, e.p("u.tar"), []tarMember{{"k\xff/x.jpg", e.img}})
		}, want: []string{`"u.tar/k\xff/x.jpg"`}},
		{name: "bad .cls", layout: "tar", build: func(t *testing.T, e *secEnv) {
			mustT(t, os.Remove(e.p("good.tar")))
			writeTar(t, e.p("c.tar"), []tarMember{{"x.jpg", e.img}, {"x.cls", []byte("cat")}, {"y.jpg", e.img}, {"y.cls", []byte("1")}})
		}, skip: SkipBadLabel, want: []string{"c.tar/y.jpg"}},
		{name: "missing .cls among others", layout: "tar", build: func(t *testing.T, e *secEnv) {
			mustT(t, os.Remove(e.p("good.tar")))
			writeTar(t, e.p("c.tar"), []tarMember{{"x.jpg", e.img}, {"y.jpg", e.img}, {"y.cls", []byte("1")}})
		}, skip: SkipBadLabel, want: []string{"c.tar/y.jpg"}},
	}
}

func TestDatasetHostileEntries(t *testing.T) {
	cases := secCases()
	if len(cases) < 30 {
		t.Fatalf("%d cases, want at least 30", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needUser && os.Geteuid() == 0 {
				t.Skip("SKIP: running as root, which reads any file: the unreadable case cannot be built")
			}
			layout := tc.layout
			if layout == "" {
				layout = "folder"
			}
			e := newSecEnv(t, layout)
			if tc.build != nil {
				tc.build(t, e)
			}
			done := make(chan struct{})
			var d *Dataset
			var err error
			go func() {
				defer close(done)
				d, err = OpenWith(e.dir, OpenOptions{Index: "-"})
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
			if tc.skip != "" && st.Skipped[tc.skip] == 0 {
				t.Errorf("skipped %v, want a %s", d.Skipped(), tc.skip)
			}
			if tc.skip == "" && len(d.Skipped()) != 0 {
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
			for _, w := range tc.want {
				if _, ok := paths[w]; !ok {
					t.Errorf("%q not served; catalog %v", w, keys(paths))
				}
			}
			for _, c := range d.ClassNames() {
				if !isProtoString(c) {
					t.Errorf("class name %q is not valid UTF-8", c)
				}
			}
			sd, serr := OpenWith(e.dir, OpenOptions{Strict: true, Index: "-"})
			if serr == nil {
				sd.Close()
			}
			if (serr != nil) != (tc.skip != "") || (serr != nil && !errors.Is(serr, ErrLayout)) {
				t.Errorf("strict Open: %v; want ErrLayout exactly when an entry is bad", serr)
			}
			broken := uint64(1 << 62)
			if tc.after != nil {
				i, ok := paths[tc.path]
				if !ok {
					t.Fatalf("%s not in the catalog", tc.path)
				}
				tc.after(t, e)
				broken = i
			}
			readAll(t, d, broken, tc.path, tc.readErr)
		})
	}
}

// readAll reads every sample: none may hold the canary; sample broken must
// fail with want, naming itself and path; the others must read.
func readAll(t *testing.T, d *Dataset, broken uint64, path string, want error) {
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
		if bytes.Contains(b, []byte(canaryMark)) {
			t.Fatalf("Read(%d) (%s) returned the canary", i, d.Path(i))
		}
		if i == broken {
			if !errors.Is(err, want) || !errors.Is(err, ErrRead) {
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

// TestServeNeverSendsCanary serves a directory full of symlinks to the
// canary, swaps a file for one after start, and checks that the catalog
// can be read and no response carries the canary.
func TestServeNeverSendsCanary(t *testing.T) {
	e := newSecEnv(t, "folder")
	symlink(t, e.canary, e.p("good/evil.jpg"))
	symlink(t, "/etc/passwd", e.p("good/passwd.jpg"))
	symlink(t, filepath.Join(e.outside, "cls"), e.p("evil"))
	symlink(t, filepath.Join(e.outside, "cls"), e.p("good/sub"))
	writeFile(t, e.p("cl\xe9/x.jpg"), e.img)
	cfg := DefaultConfig()
	cfg.Data, cfg.Listen, cfg.CPUs, cfg.Index, cfg.Insecure = e.dir, "", 1, "-", true
	a := startAgent(t, cfg)
	// Swap after start.
	mustT(t, os.Remove(e.p("good/a.jpg")))
	symlink(t, e.canary, e.p("good/a.jpg"))

	stream, err := a.client.Catalog(context.Background(), &dataplanepb.CatalogRequest{})
	mustT(t, err)
	page, err := stream.Recv()
	if err != nil {
		t.Fatalf("catalog with a non-UTF-8 class: %v", err)
	}
	if len(page.ContentHashes) != 32*len(page.Labels) {
		t.Errorf("%d bytes of hashes for %d samples", len(page.ContentHashes), len(page.Labels))
	}
	n := a.Dataset().Len()
	var reqs []*dataplanepb.FetchRequest
	for i := range n {
		reqs = append(reqs, &dataplanepb.FetchRequest{Tag: i, Sample: i})
	}
	failed := 0
	for _, r := range fetchAll(t, a.client, reqs) {
		if bytes.Contains(r.Data, []byte(canaryMark)) {
			t.Fatalf("sample %d served the canary", r.Sample)
		}
		if r.Error != nil {
			failed++
			if r.Error.Kind != dataplanepb.ErrorKind_ERROR_KIND_IO || !strings.Contains(r.Error.Message, "good/a.jpg") {
				t.Errorf("sample %d: %v, want an IO error naming good/a.jpg", r.Sample, r.Error)
			}
		}
	}
	if failed != 1 {
		t.Errorf("%d samples failed, want 1 (the swapped one)", failed)
	}
}
