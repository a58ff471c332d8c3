package cache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/atomicfile"
	"github.com/sophon-dl/sophon/internal/testutil"
)

// mountTmpfs mounts a tmpfs with flags and data on a new directory (root
// only; skipped with the reason otherwise).
func mountTmpfs(t *testing.T, flags uintptr, data string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Require(t, "a read-only mount needs root (a non-root agent fails a plain chmod 0555 directory the same way)")
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", flags, data); err != nil {
		testutil.Require(t, "mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestOpenUnusable: a cache that cannot be used when opened is no error:
// the store is off (degraded) after exactly one warning, serves nothing
// and writes nothing. Root bypasses permission bits, so the unusable
// directories are ones that fail for root too: read-only mounts, a path
// under a regular file, a symlink loop; and an 8 GiB sparse index, which
// is refused from its size without being read.
func TestOpenUnusable(t *testing.T) {
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"read-only-tmpfs-1777", func(t *testing.T) string { return mountTmpfs(t, syscall.MS_RDONLY, "mode=1777") }},
		{"read-only-mount-0700", func(t *testing.T) string { return mountTmpfs(t, syscall.MS_RDONLY, "mode=0700") }},
		{"under-a-regular-file", func(t *testing.T) string {
			f := filepath.Join(t.TempDir(), "file")
			os.WriteFile(f, []byte("x"), 0o600)
			return filepath.Join(f, "cache")
		}},
		{"symlink-loop", func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "loop")
			if err := os.Symlink(d, d); err != nil {
				t.Fatal(err)
			}
			return d
		}},
		{"unopenable-non-root", func(t *testing.T) string {
			if os.Geteuid() == 0 {
				t.Skip("SKIP: root opens a mode-0000 directory; the read-only mounts and symlink loop cover root")
			}
			d := filepath.Join(t.TempDir(), "closed")
			os.Mkdir(d, 0o000)
			t.Cleanup(func() { os.Chmod(d, 0o700) })
			return d
		}},
		{"sparse-8GiB-index", func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "c")
			s := open(t, d, 1<<20, "")
			put(s.View(fp, "p@1", 0, nil), 1, payload(1, 100))
			s.Close()
			if err := os.Truncate(filepath.Join(d, indexName), 8<<30); err != nil {
				t.Fatal(err)
			}
			return d
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.dir(t)
			var log testutil.SyncBuffer
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			s, err := Open(Options{Dir: dir, Bytes: 1 << 20, Log: zerolog.New(&log)})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatalf("Open failed for an unusable directory: %v", err)
			}
			defer s.Close()
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Fatalf("Open allocated %d bytes", alloc)
			}
			if w := log.Lines(`"level":"warn"`); len(w) != 1 || !strings.Contains(w[0], "degraded") {
				t.Fatalf("warnings %q, want one saying degraded", w)
			}
			t.Logf("the warning: %s", log.Lines(`"level":"warn"`)[0])
			v := s.View(fp, "p@1", 0, nil)
			if st := s.Stats(); !st.Degraded || v.Has(1) || put(v, 2, payload(2, 100)) {
				t.Fatalf("stats %+v: want degraded, nothing served or written", st)
			}
			if _, _, err := v.Get(1); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Get: %v, want a miss", err)
			}
		})
	}
}

// TestKeyFile: the key is made 0600 beside the directory, outside it, and
// reused by the next Open; one that is missing is made anew and the
// entries signed under the old one are removed (one warning), never
// served. A key file that is too open, of another size, a symlink or
// inside the directory is refused.
func TestKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	s := open(t, dir, 1<<20, "")
	v := s.View(fp, "p@1", 3, nil)
	put(v, 1, payload(1, 100))
	s.Close()
	kf := DefaultKeyFile(dir)
	fi, err := os.Lstat(kf)
	if err != nil || fi.Mode() != 0o600 || fi.Size() != KeySize || filepath.Dir(kf) == dir {
		t.Fatalf("key file %s: %v, %v", kf, fi.Mode(), err)
	}
	s = open(t, dir, 1<<20, "")
	if got, _, err := s.View(fp, "p@1", 3, nil).Get(1); err != nil || !bytes.Equal(got, payload(1, 100)) {
		t.Fatalf("entry under the kept key: %v", err)
	}
	s.Close()
	os.Remove(kf)
	var log testutil.SyncBuffer
	s, err = Open(Options{Dir: dir, Bytes: 1 << 20, Log: zerolog.New(&log)})
	if err != nil {
		t.Fatal(err)
	}
	if v := s.View(fp, "p@1", 3, nil); v.Has(1) || s.Stats().Degraded || len(log.Lines(`"level":"warn"`)) != 1 {
		t.Fatalf("after a new key: has %v, %+v, warnings %q", v.Has(1), s.Stats(), log.Lines(`"level":"warn"`))
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "*"+entryExt)); len(ents) != 0 {
		t.Fatalf("entries under the old key left: %q", ents)
	}
	s.Close()

	good, _ := os.ReadFile(kf)
	for _, c := range []struct {
		name string
		make func(path string)
	}{
		{"world-readable", func(p string) { os.WriteFile(p, good, 0o644); os.Chmod(p, 0o644) }},
		{"short", func(p string) { os.WriteFile(p, good[:7], 0o600) }},
		{"huge-sparse", func(p string) { os.WriteFile(p, nil, 0o600); os.Truncate(p, 8<<30) }},
		{"symlink", func(p string) { os.WriteFile(p+".real", good, 0o600); os.Symlink(p+".real", p) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			kf := filepath.Join(t.TempDir(), "key")
			c.make(kf)
			var log testutil.SyncBuffer
			s, err := Open(Options{Dir: dir, Bytes: 1 << 20, KeyFile: kf, Log: zerolog.New(&log)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if w := log.Lines(`"level":"warn"`); !s.Stats().Degraded || len(w) != 1 || !strings.Contains(w[0], "key file") {
				t.Fatalf("stats %+v, warnings %q: want degraded naming the key file", s.Stats(), w)
			}
		})
	}
	if _, err := Open(Options{Dir: dir, Bytes: 1 << 20, KeyFile: filepath.Join(dir, "k")}); err == nil {
		t.Fatal("a key file inside the cache directory accepted")
	}
}

// TestForgedEntry: an entry holding another sample's payload under a
// valid header and checksum (whoever wrote it knew the format but not the
// key) is detected when read, dropped, counted (Forged and Refills) and
// never served; the sample's next Put is served again.
func TestForgedEntry(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20, "")
	v := s.View(fp, "val@1", 5, nil)
	put(v, 1, payload(1, 600))
	put(v, 2, payload(2, 600))
	forged, err := Encode(v.header(1), payload(2, 600), bytes.Repeat([]byte{1}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := DecodeHeader(forged, 0); err != nil {
		t.Fatalf("the forged header does not decode: %v", err)
	}
	os.WriteFile(filepath.Join(dir, entryName(key{fp, 1})), forged, 0o600)
	got, _, err := v.Get(1)
	if !errors.Is(err, ErrForged) || !errors.Is(err, ErrEntry) || got != nil {
		t.Fatalf("served %d bytes, err %v; want ErrForged", len(got), err)
	}
	if st := s.Stats(); st.Forged != 1 || st.Refills != 1 || v.Has(1) {
		t.Fatalf("stats %+v, has %v: want one forged refill, dropped", st, v.Has(1))
	}
	if _, err := os.Stat(filepath.Join(dir, entryName(key{fp, 1}))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("forged entry not removed: %v", err)
	}
	put(v, 1, payload(1, 600))
	if got, _, err := v.Get(1); err != nil || !bytes.Equal(got, payload(1, 600)) {
		t.Fatalf("refilled entry: %v", err)
	}
}

// TestBuildChange: a finished output made by another build of the op
// library and codec is a miss, not served and not a refill; the next Put
// replaces it. Encoded files (split 0) are any build's.
func TestBuildChange(t *testing.T) {
	dir := t.TempDir()
	openBuild := func(build string) *Store {
		s, err := Open(Options{Dir: dir, Bytes: 1 << 20, Build: build, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := openBuild("ops-a")
	put(s.View(fp, "val@1", 5, nil), 1, payload(1, 100))
	put(s.View(fp, "val@1", 0, nil), 2, payload(2, 100))
	s.Close()
	s = openBuild("ops-b")
	v := s.View(fp, "val@1", 5, nil)
	if v.Has(1) {
		t.Fatal("another build's finished output indexed as this build's")
	}
	if got, _, err := v.Get(1); !errors.Is(err, fs.ErrNotExist) || got != nil {
		t.Fatalf("another build's output: %d bytes, %v; want a miss", len(got), err)
	}
	if _, _, err := s.View(fp, "val@1", 0, nil).Get(2); err != nil {
		t.Fatalf("an encoded file across builds: %v", err)
	}
	put(v, 1, payload(9, 100))
	if got, _, err := v.Get(1); err != nil || !bytes.Equal(got, payload(9, 100)) {
		t.Fatalf("this build's output: %v", err)
	}
	if st := s.Stats(); st.Refills != 0 || st.Samples != 2 {
		t.Fatalf("stats %+v: want no refill, the old output replaced", st)
	}
	s.Close()
	if openBuild("ops-a").View(fp, "val@1", 5, nil).Has(1) {
		t.Fatal("the replaced output is still the old build's")
	}
}

// BenchmarkGetFinished reads and checks (CRC and MAC) one finished output
// of imagenet-val's size (3x224x224 float32) from the cache.
func BenchmarkGetFinished(b *testing.B) {
	s, err := Open(Options{Dir: b.TempDir(), Bytes: 1 << 30, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	v := s.View(fp, "val@1", 5, nil)
	p := payload(1, 3*224*224*4)
	put(v, 1, p)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if _, _, err := v.Get(1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/entry")
}

// TestQueuedWriteCancelled: a planned Put that does not fit beside a
// queued write of a sample the plan no longer keeps cancels that write
// instead of being skipped; the cancelled sample is never indexed.
func TestQueuedWriteCancelled(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 2000, PolicyPlanned)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Close's, on a failure too
	create := s.create
	s.create = func(name string) (atomicfile.File, error) {
		if strings.HasSuffix(name, entryName(key{fp, 1})) {
			close(started)
			<-release
		}
		return create(name)
	}
	keep := map[uint64]bool{1: true, 2: true}
	var mu sync.Mutex
	v := s.View(fp, "p@1", 0, func(x uint64) bool { mu.Lock(); defer mu.Unlock(); return keep[x] })
	if !v.Put(1, payload(1, 1000)) {
		t.Fatal("put 1 refused")
	}
	<-started // the writer holds sample 1's write; 2 stays queued
	if !v.Put(2, payload(2, 1000)) {
		t.Fatal("put 2 refused")
	}
	mu.Lock()
	keep = map[uint64]bool{1: true, 3: true}
	mu.Unlock()
	if !v.Put(3, payload(3, 1000)) {
		t.Fatal("put 3 skipped behind a queued write the plan no longer keeps")
	}
	once.Do(func() { close(release) })
	s.Drain()
	if !v.Has(1) || v.Has(2) || !v.Has(3) {
		t.Fatalf("resident 1:%v 2:%v 3:%v, want 1 and 3", v.Has(1), v.Has(2), v.Has(3))
	}
	if _, err := os.Stat(filepath.Join(dir, entryName(key{fp, 2}))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the cancelled write left a file: %v", err)
	}
	if st := s.Stats(); st.Bytes > 2000 || st.Fills != 2 {
		t.Fatalf("stats %+v: want 2 fills within the budget", st)
	}
}
