package dataset_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

func openIdx(t *testing.T, dir string, opts dataset.OpenOptions) *dataset.Dataset {
	t.Helper()
	d, err := dataset.OpenWith(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestIndexReuse(t *testing.T) {
	dir := datasettest.ImageFolder(t, []string{"a", "b"}, 3)
	first := openIdx(t, dir, dataset.OpenOptions{})
	if st := first.Stats(); st.Hashed != 6 || st.Reused != 0 || st.IndexFile != filepath.Join(dir, dataset.IndexName) {
		t.Fatalf("first open: %+v, want 6 hashed into %s", st, dataset.IndexName)
	}
	second := openIdx(t, dir, dataset.OpenOptions{})
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
	datasettest.WriteFile(t, filepath.Join(dir, "a", "imga.jpg"), datasettest.JPEG(t, 77))
	if st := openIdx(t, dir, dataset.OpenOptions{}).Stats(); st.Hashed != 1 || st.Reused != 5 {
		t.Fatalf("after a change: hashed %d, reused %d; want 1 and 5", st.Hashed, st.Reused)
	}
	// A corrupt index is ignored (and rewritten).
	datasettest.Must(t, os.WriteFile(filepath.Join(dir, dataset.IndexName), []byte("garbage"), 0o644))
	if st := openIdx(t, dir, dataset.OpenOptions{}).Stats(); st.Hashed != 6 {
		t.Fatalf("corrupt index: hashed %d, want 6", st.Hashed)
	}
	// An explicit file, and none.
	idx := filepath.Join(t.TempDir(), "x.idx")
	openIdx(t, dir, dataset.OpenOptions{Index: idx})
	if st := openIdx(t, dir, dataset.OpenOptions{Index: idx}).Stats(); st.Reused != 6 || st.IndexFile != idx {
		t.Fatalf("explicit index: %+v", st)
	}
	if st := openIdx(t, dir, dataset.OpenOptions{Index: "-"}).Stats(); st.Hashed != 6 || st.IndexFile != "" {
		t.Fatalf("no index: %+v", st)
	}
	// An index that is a symlink out of the directory is not followed.
	datasettest.Must(t, os.Remove(filepath.Join(dir, dataset.IndexName)))
	canary := filepath.Join(t.TempDir(), "c")
	datasettest.WriteFile(t, canary, []byte(datasettest.CanaryMark))
	datasettest.Must(t, os.Symlink(canary, filepath.Join(dir, dataset.IndexName)))
	openIdx(t, dir, dataset.OpenOptions{})
	if b, _ := os.ReadFile(canary); string(b) != datasettest.CanaryMark {
		t.Fatal("the canary behind the index symlink was overwritten")
	}
}

func TestIndexTarReuse(t *testing.T) {
	dir := t.TempDir()
	datasettest.WriteTar(t, filepath.Join(dir, "s.tar"), []datasettest.Member{{Name: "k/a.jpg", Data: datasettest.JPEG(t, 1)}, {Name: "k/b.jpg", Data: datasettest.JPEG(t, 2)}})
	openIdx(t, dir, dataset.OpenOptions{})
	if st := openIdx(t, dir, dataset.OpenOptions{}).Stats(); st.Hashed != 0 || st.Reused != 2 {
		t.Fatalf("second open: %+v", st)
	}
}

func TestFingerprintCoversContent(t *testing.T) {
	dir := datasettest.ImageFolder(t, []string{"a"}, 2)
	base := openIdx(t, dir, dataset.OpenOptions{Index: "-"}).Fingerprint()
	name := filepath.Join(dir, "a", "imga.jpg")
	b, err := os.ReadFile(name)
	datasettest.Must(t, err)
	b[len(b)/2] ^= 1 // same path, size and label
	datasettest.Must(t, os.WriteFile(name, b, 0o644))
	if got := openIdx(t, dir, dataset.OpenOptions{Index: "-"}).Fingerprint(); got == base {
		t.Fatalf("one byte changed, fingerprint still %s", got)
	}
}
