package storageagent

import (
	"os"
	"path/filepath"
	"testing"
)

func openIdx(t *testing.T, dir string, opts OpenOptions) *Dataset {
	t.Helper()
	d, err := OpenWith(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestIndexReuse(t *testing.T) {
	dir := imageFolder(t, []string{"a", "b"}, 3)
	first := openIdx(t, dir, OpenOptions{})
	if st := first.Stats(); st.Hashed != 6 || st.Reused != 0 || st.IndexFile != filepath.Join(dir, indexName) {
		t.Fatalf("first open: %+v, want 6 hashed into %s", st, indexName)
	}
	second := openIdx(t, dir, OpenOptions{})
	if st := second.Stats(); st.Hashed != 0 || st.Reused != 6 {
		t.Fatalf("second open: hashed %d, reused %d; want 0 and 6", st.Hashed, st.Reused)
	}
	for i := range first.Len() {
		if first.ContentHash(i) != second.ContentHash(i) || first.ContentHash(i) == [32]byte{} {
			t.Fatalf("sample %d: hash not reused", i)
		}
	}
	if first.Fingerprint() != second.Fingerprint() {
		t.Fatal("fingerprint changed with the index")
	}
	// One file rewritten: only it is hashed again.
	writeFile(t, filepath.Join(dir, "a", "imga.jpg"), testJPEG(t, 77))
	if st := openIdx(t, dir, OpenOptions{}).Stats(); st.Hashed != 1 || st.Reused != 5 {
		t.Fatalf("after a change: hashed %d, reused %d; want 1 and 5", st.Hashed, st.Reused)
	}
	// A corrupt index is ignored (and rewritten).
	mustT(t, os.WriteFile(filepath.Join(dir, indexName), []byte("garbage"), 0o644))
	if st := openIdx(t, dir, OpenOptions{}).Stats(); st.Hashed != 6 {
		t.Fatalf("corrupt index: hashed %d, want 6", st.Hashed)
	}
	// An explicit file, and none.
	idx := filepath.Join(t.TempDir(), "x.idx")
	openIdx(t, dir, OpenOptions{Index: idx})
	if st := openIdx(t, dir, OpenOptions{Index: idx}).Stats(); st.Reused != 6 || st.IndexFile != idx {
		t.Fatalf("explicit index: %+v", st)
	}
	if st := openIdx(t, dir, OpenOptions{Index: "-"}).Stats(); st.Hashed != 6 || st.IndexFile != "" {
		t.Fatalf("no index: %+v", st)
	}
	// An index that is a symlink out of the directory is not followed.
	mustT(t, os.Remove(filepath.Join(dir, indexName)))
	canary := filepath.Join(t.TempDir(), "c")
	writeFile(t, canary, []byte(canaryMark))
	mustT(t, os.Symlink(canary, filepath.Join(dir, indexName)))
	openIdx(t, dir, OpenOptions{})
	if b, _ := os.ReadFile(canary); string(b) != canaryMark {
		t.Fatal("the canary behind the index symlink was overwritten")
	}
}

func TestIndexTarReuse(t *testing.T) {
	dir := t.TempDir()
	writeTar(t, filepath.Join(dir, "s.tar"), []tarMember{{"k/a.jpg", testJPEG(t, 1)}, {"k/b.jpg", testJPEG(t, 2)}})
	openIdx(t, dir, OpenOptions{})
	if st := openIdx(t, dir, OpenOptions{}).Stats(); st.Hashed != 0 || st.Reused != 2 {
		t.Fatalf("second open: %+v", st)
	}
}

func TestFingerprintCoversContent(t *testing.T) {
	dir := imageFolder(t, []string{"a"}, 2)
	base := openIdx(t, dir, OpenOptions{Index: "-"}).Fingerprint()
	name := filepath.Join(dir, "a", "imga.jpg")
	b, err := os.ReadFile(name)
	mustT(t, err)
	b[len(b)/2] ^= 1 // same path, size and label
	mustT(t, os.WriteFile(name, b, 0o644))
	if got := openIdx(t, dir, OpenOptions{Index: "-"}).Fingerprint(); got == base {
		t.Fatalf("one byte changed, fingerprint still %s", got)
	}
}

func FuzzLoadIndex(f *testing.F) {
	dir := "/data"
	f.Add(encodeIndex(dir, []sample{{rel: "a/x.jpg", size: 10, id: fileID{ino: 3}, mtime: -5}, {rel: "b", off: 512}}))
	f.Add(encodeIndex(dir, nil))
	f.Add([]byte(indexMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeIndex(b, dir)
		if err != nil {
			return
		}
		var ss []sample
		for rel, e := range m {
			ss = append(ss, sample{rel: rel, size: int64(e.size), off: int64(e.off), id: fileID{ino: e.ino}, mtime: e.mtime, hash: e.hash})
		}
		m2, err := decodeIndex(encodeIndex(dir, ss), dir)
		if err != nil || len(m2) != len(m) {
			t.Fatalf("re-encoded index: %v, %d entries, want %d", err, len(m2), len(m))
		}
	})
}
