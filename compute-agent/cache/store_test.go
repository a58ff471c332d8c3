package cache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/atomicfile"
	"github.com/sophon-dl/sophon/internal/testutil"
)

const fp = "fingerprint-a"

// fuzzKey is a MAC key for entries encoded outside a store.
var fuzzKey = bytes.Repeat([]byte{0x5a}, KeySize)

func open(t *testing.T, dir string, budget int64, policy string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, Bytes: budget, Policy: policy, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// put is v.Put, waited for.
func put(v *View, sample uint64, b []byte) bool {
	ok := v.Put(sample, b)
	v.s.Drain()
	return ok && v.Has(sample)
}

func payload(sample uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int(sample)*7 + i)
	}
	return b
}

// TestRoundTripAndRestart: entries written are served, and survive a
// reopen (the index), also when the index is missing or damaged.
func TestRoundTripAndRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	s := open(t, dir, 1<<20, "")
	v := s.View(fp, "p@1", 0, nil)
	for i := range uint64(5) {
		if !put(v, i, payload(i, 1000)) {
			t.Fatalf("put %d refused", i)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, damage := range []string{"", "missing", "garbage"} {
		switch damage {
		case "missing":
			os.Remove(filepath.Join(dir, indexName))
		case "garbage":
			os.WriteFile(filepath.Join(dir, indexName), []byte("{not json"), 0o600)
		}
		s := open(t, dir, 1<<20, "")
		v := s.View(fp, "p@1", 0, nil)
		for i := range uint64(5) {
			got, _, err := v.Get(i)
			if err != nil || !bytes.Equal(got, payload(i, 1000)) {
				t.Fatalf("index %q: sample %d: %v", damage, i, err)
			}
		}
		if st := s.Stats(); st.Samples != 5 || st.Hits != 5 || st.Refills != 0 {
			t.Fatalf("index %q: stats %+v", damage, st)
		}
		s.Close()
	}
}

// TestBadEntries: a corrupt, truncated, swapped, foreign or stale entry
// is never served; it is dropped and counted as a refill.
func TestBadEntries(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(s *Store, dir string)
		view   func(s *Store) *View
	}{
		{"corrupt", func(_ *Store, dir string) { flip(t, dir, 1, 40) }, nil},
		{"corrupt-header", func(_ *Store, dir string) { flip(t, dir, 1, 15) }, nil},
		{"truncated", func(_ *Store, dir string) {
			p := filepath.Join(dir, entryName(key{fp, 1}))
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-9], 0o600)
		}, nil},
		{"swapped", func(_ *Store, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, entryName(key{fp, 2})))
			os.WriteFile(filepath.Join(dir, entryName(key{fp, 1})), b, 0o600)
		}, nil},
		{"other-pipeline-in-file", func(s *Store, dir string) {
			b, _ := Encode(Header{Fingerprint: fp, Pipeline: "q@2", Split: 0, Sample: 1}, payload(1, 1000), s.key)
			os.WriteFile(filepath.Join(dir, entryName(key{fp, 1})), b, 0o600)
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, 1<<20, "")
			v := s.View(fp, "p@1", 0, nil)
			for i := range uint64(3) {
				put(v, i, payload(i, 1000))
			}
			c.damage(s, dir)
			got, _, err := v.Get(1)
			if !errors.Is(err, ErrEntry) || got != nil {
				t.Fatalf("served %d bytes, err %v; want ErrEntry", len(got), err)
			}
			if v.Has(1) {
				t.Fatal("bad entry still indexed")
			}
			if st := s.Stats(); st.Refills != 1 {
				t.Fatalf("refills %d, want 1", st.Refills)
			}
			if _, _, err := v.Get(0); err != nil {
				t.Fatalf("a good entry: %v", err)
			}
		})
	}
	// Foreign and stale: the same directory seen as another dataset,
	// pipeline or split holds nothing for it.
	dir := t.TempDir()
	s := open(t, dir, 1<<20, "")
	put(s.View(fp, "p@1", 0, nil), 1, payload(1, 1000))
	for _, v := range []*View{s.View("other", "p@1", 0, nil), s.View(fp, "q@2", 0, nil), s.View(fp, "p@1", 5, nil)} {
		if v.Has(1) {
			t.Fatalf("%s %s %d: has sample 1", v.fp, v.pipe, v.split)
		}
		if _, _, err := v.Get(1); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s %s %d: %v", v.fp, v.pipe, v.split, err)
		}
	}
	// A Put of the new split replaces the stale entry.
	v5 := s.View(fp, "p@1", 5, nil)
	put(v5, 1, payload(9, 10))
	if got, _, err := v5.Get(1); err != nil || !bytes.Equal(got, payload(9, 10)) {
		t.Fatalf("replaced entry: %v", err)
	}
	if st := s.Stats(); st.Samples != 1 {
		t.Fatalf("%d resident, want 1", st.Samples)
	}
}

func flip(t *testing.T, dir string, sample uint64, at int) {
	t.Helper()
	p := filepath.Join(dir, entryName(key{fp, sample}))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0x40
	os.WriteFile(p, b, 0o600)
}

// TestEvictedUnderRead: an entry removed after the index named it is a
// miss, not a refill.
func TestEvictedUnderRead(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20, PolicyLRU)
	v := s.View(fp, "p@1", 0, nil)
	put(v, 1, payload(1, 100))
	os.Remove(filepath.Join(dir, entryName(key{fp, 1})))
	if _, _, err := v.Get(1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want not found", err)
	}
	if st := s.Stats(); st.Refills != 0 || st.Samples != 0 || st.Degraded {
		t.Fatalf("stats %+v: want a plain miss", st)
	}
}

// TestSymlinks: a symlink planted in the directory is never followed: at
// open it is removed (its target untouched), and one planted later is not
// served.
func TestSymlinks(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	s := open(t, dir, 1<<20, "")
	v := s.View(fp, "p@1", 0, nil)
	put(v, 1, payload(1, 100))
	put(v, 2, payload(2, 100))
	// Sample 1's entry becomes a link to a valid entry outside.
	name := entryName(key{fp, 1})
	target := filepath.Join(outside, "t")
	if err := os.Rename(filepath.Join(dir, name), target); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := v.Get(1); err == nil || got != nil {
		t.Fatal("served an entry through a symlink")
	}
	os.Symlink(target, filepath.Join(dir, entryName(key{fp, 3})))
	s.Close()
	s = open(t, dir, 1<<20, "")
	v = s.View(fp, "p@1", 0, nil)
	if v.Has(3) || v.Has(1) {
		t.Fatal("a symlink was indexed")
	}
	if _, err := os.Lstat(filepath.Join(dir, entryName(key{fp, 3}))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("planted symlink not removed: %v", err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("symlink target touched: %v", err)
	}
	if !v.Has(2) {
		t.Fatal("good entry lost")
	}
}

// TestOneAgent: a directory in use is refused to a second store, which
// is off (degraded) rather than an error; it neither serves nor writes.
func TestOneAgent(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20, "")
	put(s.View(fp, "p@1", 0, nil), 1, payload(1, 100))
	s2 := open(t, dir, 1<<20, "")
	v2 := s2.View(fp, "p@1", 0, nil)
	if st := s2.Stats(); !st.Degraded || v2.Has(1) || put(v2, 2, payload(2, 100)) {
		t.Fatalf("a second store used a directory in use: %+v", st)
	}
	s2.Close()
	s.Close()
	if s3 := open(t, dir, 1<<20, ""); s3.Stats().Degraded || !s3.View(fp, "p@1", 0, nil).Has(1) {
		t.Fatal("the directory unusable after its agent closed it")
	}
}

// TestPerms: the directory is created 0700 and a wider one narrowed.
func TestPerms(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	open(t, dir, 1<<20, "")
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("created %v, want 0700", fi.Mode().Perm())
	}
	wide := t.TempDir()
	os.Chmod(wide, 0o755)
	open(t, wide, 1<<20, "")
	if fi, _ := os.Stat(wide); fi.Mode().Perm() != 0o700 {
		t.Fatalf("left %v, want 0700", fi.Mode().Perm())
	}
}

// TestDegrade: a full disk or a vanished directory turns the cache off,
// without an error to the caller.
func TestDegrade(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20, "")
	v := s.View(fp, "p@1", 0, nil)
	put(v, 1, payload(1, 100))
	s.create = func(string) (atomicfile.File, error) {
		return nil, &fs.PathError{Op: "open", Path: "x", Err: syscall.ENOSPC}
	}
	if put(v, 2, payload(2, 100)) {
		t.Fatal("put succeeded on a full disk")
	}
	if st := s.Stats(); !st.Degraded || v.Has(1) {
		t.Fatalf("not degraded: %+v", st)
	}
	if _, _, err := v.Get(1); err == nil {
		t.Fatal("served from a degraded cache")
	}

	dir2 := filepath.Join(t.TempDir(), "gone")
	s2 := open(t, dir2, 1<<20, "")
	v2 := s2.View(fp, "p@1", 0, nil)
	put(v2, 1, payload(1, 100))
	os.RemoveAll(dir2)
	if _, _, err := v2.Get(1); err == nil {
		t.Fatal("served from a vanished directory")
	}
	if put(v2, 2, payload(2, 100)) || !s2.Stats().Degraded {
		t.Fatal("not degraded after the directory vanished")
	}
	if st := s2.Stats(); st.Refills != 0 {
		t.Fatalf("a vanished directory counted %d refills", st.Refills)
	}
}

// TestBudget: LRU evicts the least recently used; planned evicts only
// what the plan does not keep, else skips.
func TestBudget(t *testing.T) {
	b, _ := Encode(Header{Fingerprint: fp, Pipeline: "p@1", Sample: 1}, payload(1, 1000), fuzzKey)
	one := int64(len(b))
	s := open(t, t.TempDir(), 2*one, PolicyLRU)
	v := s.View(fp, "p@1", 0, nil)
	put(v, 1, payload(1, 1000))
	put(v, 2, payload(2, 1000))
	v.Get(1) // 2 is now the least recently used
	put(v, 3, payload(3, 1000))
	if !v.Has(1) || v.Has(2) || !v.Has(3) {
		t.Fatalf("lru kept 1:%v 2:%v 3:%v, want 1 and 3", v.Has(1), v.Has(2), v.Has(3))
	}
	p := open(t, t.TempDir(), 2*one, PolicyPlanned)
	keep := map[uint64]bool{1: true, 2: true}
	pv := p.View(fp, "p@1", 0, func(s uint64) bool { return keep[s] })
	put(pv, 1, payload(1, 1000))
	put(pv, 2, payload(2, 1000))
	if put(pv, 3, payload(3, 1000)) || !pv.Has(1) || !pv.Has(2) {
		t.Fatal("planned cache evicted a kept sample")
	}
	delete(keep, 1)
	if !put(pv, 3, payload(3, 1000)) || pv.Has(1) {
		t.Fatal("planned cache did not evict an unplanned sample")
	}
	if st := p.Stats(); st.Skipped != 1 || st.Bytes > 2*one {
		t.Fatalf("stats %+v", st)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"123": 123, "64MiB": 64 << 20, "2GB": 2e9, "1.5KiB": 1536, "10M": 10 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "5 parsecs"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

// FuzzDecodeCacheEntry: the entry decoder on outside bytes never panics,
// and what it accepts re-encodes to the same bytes.
func FuzzDecodeCacheEntry(f *testing.F) {
	b, _ := Encode(Header{Fingerprint: fp, Pipeline: "p@1", Split: 5, Sample: 7, Build: "b1"}, []byte("payload"), fuzzKey)
	f.Add(b)
	f.Add(b[:40])
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, size, err := DecodeHeader(b, 1<<20); err == nil && size < headerSize+trailer {
			t.Fatalf("header accepted with size %d", size)
		}
		h, p, err := Decode(b, fuzzKey, 1<<20)
		if err != nil {
			return
		}
		again, err := Encode(h, p, fuzzKey)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoded differently: %v", err)
		}
	})
}

// FuzzDecodeCacheIndex: the index decoder on outside bytes never panics.
func FuzzDecodeCacheIndex(f *testing.F) {
	f.Add([]byte(`{"version":2,"entries":[{"fingerprint":"a","sample":1,"pipeline":"p","split":0,"size":10}]}`))
	f.Add([]byte(`{"version":2,"entries":[{"fingerprint":"a","sample":1,"pipeline":"p","split":3,"build":"b1","size":10}]}`))
	f.Add([]byte(`{"version":2,"entries":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ents, err := DecodeIndex(b)
		if err != nil {
			return
		}
		for _, e := range ents {
			if e.Size <= 0 || len(e.Fingerprint) > MaxName || len(e.Build) > MaxName {
				t.Fatalf("accepted %+v", e)
			}
		}
	})
}

// TestFullTmpfs: on a real full disk (a 256 KiB tmpfs, root only) the
// cache degrades with ENOSPC instead of failing its caller, and serves
// what it wrote before.
func TestFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Require(t, "mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k,mode=0700"); err != nil {
		testutil.Require(t, "mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	s := open(t, dir, 1<<30, PolicyLRU)
	v := s.View(fp, "p@1", 0, nil)
	for i := range uint64(64) {
		if !put(v, i, payload(i, 16<<10)) {
			break
		}
	}
	st := s.Stats()
	if !st.Degraded || st.Fills == 0 || st.Fills >= 64 {
		t.Fatalf("stats %+v: want some fills, then degraded", st)
	}
	s.Close()
	s = open(t, dir, 1<<30, PolicyLRU)
	v = s.View(fp, "p@1", 0, nil)
	if got, _, err := v.Get(0); err != nil || !bytes.Equal(got, payload(0, 16<<10)) {
		t.Fatalf("an entry written before the disk filled: %v", err)
	}
}
