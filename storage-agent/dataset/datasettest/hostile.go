package datasettest

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sophon-dl/sophon/storage-agent/dataset"
)

// indexName is the dataset's default index file in the data directory.
const indexName = ".sophon-index"

// CanaryMark is in every file outside the data directory that a symlink
// points to: no read may ever return it.
const CanaryMark = "CANARY-7f3a"

// Env is one case's world: the data directory and, outside it, a canary
// file, a folder holding a canary JPEG and a canary tar.
type Env struct {
	Dir, Outside, Canary string
	Img                  []byte // a good sample's bytes (good/a.jpg, good.tar's a.jpg)
}

// NewEnv builds an Env whose data directory holds two good samples: an
// ImageFolder (layout "folder") or one tar shard (layout "tar").
func NewEnv(t *testing.T, layout string) *Env {
	e := &Env{Dir: t.TempDir(), Outside: t.TempDir(), Img: JPEG(t, 1)}
	e.Canary = filepath.Join(e.Outside, "canary.jpg")
	// As long as good/a.jpg, so a swap keeps the size.
	WriteFile(t, e.Canary, append([]byte(CanaryMark), bytes.Repeat([]byte{'C'}, len(e.Img)-len(CanaryMark))...))
	WriteFile(t, filepath.Join(e.Outside, "cls", "secret.jpg"), []byte(CanaryMark))
	WriteTar(t, filepath.Join(e.Outside, "evil.tar"), []Member{{"evil.jpg", []byte(CanaryMark)}})
	if layout == "tar" {
		WriteTar(t, filepath.Join(e.Dir, "good.tar"), []Member{{"k/a.jpg", e.Img}, {"k/b.jpg", JPEG(t, 2)}})
	} else {
		WriteFile(t, filepath.Join(e.Dir, "good", "a.jpg"), e.Img)
		WriteFile(t, filepath.Join(e.Dir, "good", "b.jpg"), JPEG(t, 2))
	}
	return e
}

// P is rel (slash-separated) inside the data directory.
func (e *Env) P(rel string) string { return filepath.Join(e.Dir, filepath.FromSlash(rel)) }

// Case builds one hostile entry. Without After, Open (lenient) must start,
// count Skip (when set) and serve Want; strict Open must refuse exactly
// when Skip is set. With After, the entry changes after Open and reading
// sample Path must fail with ReadErr.
type Case struct {
	Name     string
	Layout   string // "folder" (default) or "tar"
	Build    func(t *testing.T, e *Env)
	Skip     dataset.SkipReason
	Want     []string // Path()s that must be served
	After    func(t *testing.T, e *Env)
	Path     string // the sample After breaks
	ReadErr  error
	NeedUser bool // a non-root user (root reads anything; as root, dataset_security_test runs the case again as nobody)
}

// Cases are the hostile entries, at least 30 of them.
func Cases() []Case {
	return slices.Concat(linkCases(), nameCases(), changedCases(), shardCases())
}

// linkCases are the symlinks of a folder dataset: out of the root,
// dangling, looping, and those inside it that are allowed.
func linkCases() []Case {
	return []Case{
		{Name: "file symlink to canary outside", Build: func(t *testing.T, e *Env) { Symlink(t, e.Canary, e.P("good/evil.jpg")) }, Skip: dataset.SkipEscape},
		{Name: "file symlink to /etc/passwd", Build: func(t *testing.T, e *Env) { Symlink(t, "/etc/passwd", e.P("good/passwd.jpg")) }, Skip: dataset.SkipEscape},
		{Name: "relative symlink climbing out", Build: func(t *testing.T, e *Env) {
			rel, err := filepath.Rel(e.P("good"), e.Canary)
			Must(t, err)
			Symlink(t, rel, e.P("good/up.jpg"))
		}, Skip: dataset.SkipEscape},
		{Name: "symlink to ..", Build: func(t *testing.T, e *Env) { Symlink(t, "..", e.P("good/dotdot.jpg")) }, Skip: dataset.SkipNotRegular},
		{Name: "symlink to ../..", Build: func(t *testing.T, e *Env) { Symlink(t, "../..", e.P("good/dotdot2.jpg")) }, Skip: dataset.SkipEscape},
		{Name: "dangling symlink", Build: func(t *testing.T, e *Env) { Symlink(t, "nope.jpg", e.P("good/dangling.jpg")) }, Skip: dataset.SkipDangling},
		{Name: "symlink loop of two", Build: func(t *testing.T, e *Env) {
			Symlink(t, "l2.jpg", e.P("good/l1.jpg"))
			Symlink(t, "l1.jpg", e.P("good/l2.jpg"))
		}, Skip: dataset.SkipLoop},
		{Name: "symlink to itself", Build: func(t *testing.T, e *Env) { Symlink(t, "self.jpg", e.P("good/self.jpg")) }, Skip: dataset.SkipLoop},
		{Name: "absolute symlink into the root", Build: func(t *testing.T, e *Env) { Symlink(t, e.P("good/a.jpg"), e.P("good/abs.jpg")) }, Skip: dataset.SkipEscape},
		{Name: "class dir symlink outside", Build: func(t *testing.T, e *Env) { Symlink(t, filepath.Join(e.Outside, "cls"), e.P("evil")) }, Skip: dataset.SkipEscape},
		{Name: "class dir symlink to /etc", Build: func(t *testing.T, e *Env) { Symlink(t, "/etc", e.P("etc")) }, Skip: dataset.SkipEscape},
		{Name: "class dir symlink dangling", Build: func(t *testing.T, e *Env) { Symlink(t, "gone", e.P("gone-class")) }, Skip: dataset.SkipDangling},
		{Name: "class dir symlink loop", Build: func(t *testing.T, e *Env) { Symlink(t, "loopy", e.P("loopy")) }, Skip: dataset.SkipLoop},
		{Name: "class dir symlink inside (allowed)", Build: func(t *testing.T, e *Env) { Symlink(t, "good", e.P("alias")) },
			Want: []string{"alias/a.jpg", "good/a.jpg"}},
		{Name: "file symlink inside (allowed)", Build: func(t *testing.T, e *Env) { Symlink(t, "a.jpg", e.P("good/link.jpg")) },
			Want: []string{"good/link.jpg"}},
		{Name: "subdir symlink outside not walked", Build: func(t *testing.T, e *Env) { Symlink(t, filepath.Join(e.Outside, "cls"), e.P("good/sub")) },
			Want: []string{"good/a.jpg"}},
		{Name: "subdir symlink to .. not walked", Build: func(t *testing.T, e *Env) { Symlink(t, "..", e.P("good/up")) },
			Want: []string{"good/a.jpg"}},
	}
}

// nameCases are odd names, entries that are no regular file, unreadable
// files and folders, and a symlinked index file.
func nameCases() []Case {
	return []Case{
		{Name: "non-UTF-8 file name", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("good/\xff\xfe.jpg"), e.Img) },
			Want: []string{`"good/\xff\xfe.jpg"`}},
		{Name: "non-UTF-8 class name", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("cl\xe9/x.jpg"), e.Img) },
			Want: []string{`"cl\xe9/x.jpg"`}},
		{Name: "newline in name", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("good/a\nb.jpg"), e.Img) },
			Want: []string{`"good/a\nb.jpg"`}},
		{Name: "spaces in name", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("good/ a b .jpg"), e.Img) },
			Want: []string{"good/ a b .jpg"}},
		{Name: "leading dash", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("-rf/--help.jpg"), e.Img) },
			Want: []string{"-rf/--help.jpg"}},
		{Name: "very long name", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("good/"+strings.Repeat("n", 250)+".jpg"), e.Img) },
			Want: []string{"good/" + strings.Repeat("n", 250) + ".jpg"}},
		{Name: "deep path", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("good/"+strings.Repeat("d/", 60)+"x.jpg"), e.Img) },
			Want: []string{"good/" + strings.Repeat("d/", 60) + "x.jpg"}},
		{Name: "fifo named x.jpg", Build: func(t *testing.T, e *Env) { Must(t, unix.Mkfifo(e.P("good/fifo.jpg"), 0o644)) }, Skip: dataset.SkipNotRegular},
		{Name: "directory named x.jpg", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("good/dir.jpg/in.jpg"), e.Img) },
			Want: []string{"good/dir.jpg/in.jpg"}},
		{Name: "symlink x.jpg to a directory inside", Build: func(t *testing.T, e *Env) { Symlink(t, ".", e.P("good/cur.jpg")) }, Skip: dataset.SkipNotRegular},
		{Name: "unreadable file", NeedUser: true, Build: func(t *testing.T, e *Env) {
			WriteFile(t, e.P("good/locked.jpg"), e.Img)
			Must(t, os.Chmod(e.P("good/locked.jpg"), 0))
		}, Skip: dataset.SkipUnreadable},
		{Name: "unreadable folder", NeedUser: true, Build: func(t *testing.T, e *Env) {
			WriteFile(t, e.P("good/locked/x.jpg"), e.Img)
			Must(t, os.Chmod(e.P("good/locked"), 0))
			t.Cleanup(func() { os.Chmod(e.P("good/locked"), 0o755) })
		}, Skip: dataset.SkipUnreadable},
		{Name: "index file symlinked to canary", Build: func(t *testing.T, e *Env) { Symlink(t, e.Canary, e.P(indexName)) },
			Want: []string{"good/a.jpg"}},
	}
}

// changedCases are samples changed after indexing: the read fails, the
// agent goes on.
func changedCases() []Case {
	return []Case{
		{Name: "swapped for symlink to canary", Path: "good/a.jpg", ReadErr: dataset.ErrRead, After: func(t *testing.T, e *Env) {
			Must(t, os.Remove(e.P("good/a.jpg")))
			Symlink(t, e.Canary, e.P("good/a.jpg"))
		}},
		{Name: "swapped for symlink inside", Path: "good/a.jpg", ReadErr: dataset.ErrChanged, After: func(t *testing.T, e *Env) {
			WriteFile(t, e.P("good/other.dat"), e.Img)
			Must(t, os.Remove(e.P("good/a.jpg")))
			Symlink(t, "other.dat", e.P("good/a.jpg"))
		}},
		{Name: "replaced by another inode", Path: "good/a.jpg", ReadErr: dataset.ErrChanged, After: func(t *testing.T, e *Env) {
			WriteFile(t, e.P("good/new.tmp"), bytes.Repeat([]byte{'x'}, len(e.Img)))
			Must(t, os.Rename(e.P("good/new.tmp"), e.P("good/a.jpg")))
		}},
		{Name: "overwritten in place, same size", Path: "good/a.jpg", ReadErr: dataset.ErrChanged, After: func(t *testing.T, e *Env) {
			OverwriteAt(t, e.P("good/a.jpg"), 0, SameSizeJPEG(t, e.Img))
		}},
		{Name: "re-created, same size", Path: "good/a.jpg", ReadErr: dataset.ErrChanged, After: func(t *testing.T, e *Env) {
			Must(t, os.Remove(e.P("good/a.jpg")))
			WriteFile(t, e.P("good/a.jpg"), SameSizeJPEG(t, e.Img))
		}},
		{Name: "shard member overwritten in place", Layout: "tar", Path: "good.tar/k/a.jpg", ReadErr: dataset.ErrChanged, After: func(t *testing.T, e *Env) {
			b, err := os.ReadFile(e.P("good.tar"))
			Must(t, err)
			OverwriteAt(t, e.P("good.tar"), int64(bytes.Index(b, e.Img)), SameSizeJPEG(t, e.Img))
		}},
		{Name: "truncated", Path: "good/a.jpg", ReadErr: dataset.ErrChanged, After: func(t *testing.T, e *Env) {
			Must(t, os.Truncate(e.P("good/a.jpg"), 10))
		}},
		{Name: "removed", Path: "good/a.jpg", ReadErr: fs.ErrNotExist, After: func(t *testing.T, e *Env) {
			Must(t, os.Remove(e.P("good/a.jpg")))
		}},
		{Name: "replaced by fifo", Path: "good/a.jpg", ReadErr: dataset.ErrChanged, After: func(t *testing.T, e *Env) {
			Must(t, os.Remove(e.P("good/a.jpg")))
			Must(t, unix.Mkfifo(e.P("good/a.jpg"), 0o644))
		}},
		{Name: "replaced by directory", Path: "good/a.jpg", ReadErr: dataset.ErrChanged, After: func(t *testing.T, e *Env) {
			Must(t, os.Remove(e.P("good/a.jpg")))
			Must(t, os.Mkdir(e.P("good/a.jpg"), 0o755))
		}},
	}
}

// shardCases are broken and hostile tar shards.
func shardCases() []Case {
	return []Case{
		{Name: "cut shard", Layout: "tar", Build: func(t *testing.T, e *Env) {
			WriteTar(t, e.P("z.tar"), []Member{{"k/x.jpg", e.Img}, {"k/y.jpg", JPEG(t, 3)}})
			b, err := os.ReadFile(e.P("z.tar"))
			Must(t, err)
			Must(t, os.WriteFile(e.P("z.tar"), b[:len(b)-1024-512-100], 0o644))
		}, Skip: dataset.SkipCutShard, Want: []string{"good.tar/k/a.jpg", "z.tar/k/x.jpg"}},
		{Name: "non-tar .tar", Layout: "tar", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("junk.tar"), bytes.Repeat([]byte{7}, 3000)) },
			Skip: dataset.SkipBadShard, Want: []string{"good.tar/k/a.jpg"}},
		{Name: "empty .tar", Layout: "tar", Build: func(t *testing.T, e *Env) { WriteFile(t, e.P("empty.tar"), nil) },
			Want: []string{"good.tar/k/a.jpg"}},
		{Name: "duplicate keys in shard", Layout: "tar", Build: func(t *testing.T, e *Env) {
			WriteTar(t, e.P("dup.tar"), []Member{{"k/x.jpg", e.Img}, {"k/x.jpeg", []byte("second")}})
		}, Skip: dataset.SkipDuplicate, Want: []string{"dup.tar/k/x.jpg"}},
		{Name: "shard symlink outside", Layout: "tar", Build: func(t *testing.T, e *Env) { Symlink(t, filepath.Join(e.Outside, "evil.tar"), e.P("evil.tar")) },
			Skip: dataset.SkipEscape},
		{Name: "shard symlink dangling", Layout: "tar", Build: func(t *testing.T, e *Env) { Symlink(t, "gone.tar", e.P("x.tar")) }, Skip: dataset.SkipDangling},
		{Name: "fifo named .tar", Layout: "tar", Build: func(t *testing.T, e *Env) { Must(t, unix.Mkfifo(e.P("fifo.tar"), 0o644)) }, Skip: dataset.SkipNotRegular},
		{Name: "shard member with non-UTF-8 name", Layout: "tar", Build: func(t *testing.T, e *Env) {
			WriteTar(t, e.P("u.tar"), []Member{{"k\xff/x.jpg", e.Img}})
		}, Want: []string{`"u.tar/k\xff/x.jpg"`}},
		{Name: "bad .cls", Layout: "tar", Build: func(t *testing.T, e *Env) {
			Must(t, os.Remove(e.P("good.tar")))
			WriteTar(t, e.P("c.tar"), []Member{{"x.jpg", e.Img}, {"x.cls", []byte("cat")}, {"y.jpg", e.Img}, {"y.cls", []byte("1")}})
		}, Skip: dataset.SkipBadLabel, Want: []string{"c.tar/y.jpg"}},
		{Name: "missing .cls among others", Layout: "tar", Build: func(t *testing.T, e *Env) {
			Must(t, os.Remove(e.P("good.tar")))
			WriteTar(t, e.P("c.tar"), []Member{{"x.jpg", e.Img}, {"y.jpg", e.Img}, {"y.cls", []byte("1")}})
		}, Skip: dataset.SkipBadLabel, Want: []string{"c.tar/y.jpg"}},
	}
}
