package dataset

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
)

// TestReadTooLarge: a sample above MaxSampleBytes fails with
// ops.ErrTooLarge before anything is allocated or read.
func TestReadTooLarge(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "x.jpg"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := OpenWith(dir, OpenOptions{Index: "-"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.samples[0].size = MaxSampleBytes + 1
	if _, err := d.Read(0); !errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("Read of a huge sample = %v, want ops.ErrTooLarge", err)
	}
}

func FuzzLoadIndex(f *testing.F) {
	dir := "/data"
	f.Add(encodeIndex(dir, []sample{{rel: "a/x.jpg", size: 10, id: fileID{ino: 3}, mtime: -5}, {rel: "b", off: 512}}))
	f.Add(encodeIndex(dir, nil))
	f.Add([]byte(indexMagic))
	f.Add(encodeIndexVersion(indexMagicV1, dir, []sample{{rel: "a/x.jpg", size: 10, id: fileID{ino: 3}, mtime: -5}}))
	known, _ := jpeg.ParseSummary([]byte{1, 0, 0, 200, 0x95})
	f.Add(encodeIndex(dir, []sample{{rel: "a/x.jpg", size: 10, hdr: known}, {rel: "b", off: 512}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeIndex(b, dir)
		if err != nil {
			return
		}
		var ss []sample
		for rel, e := range m {
			ss = append(ss, sample{rel: rel, size: int64(e.size), off: int64(e.off), id: fileID{ino: e.ino}, mtime: e.mtime, hash: e.hash, hdr: e.hdr})
		}
		m2, err := decodeIndex(encodeIndex(dir, ss), dir)
		if err != nil || len(m2) != len(m) {
			t.Fatalf("re-encoded index: %v, %d entries, want %d", err, len(m2), len(m))
		}
		for rel, e := range m {
			if e2 := m2[rel]; e2.hash != e.hash || e2.hdr != e.hdr || !e2.hasHdr {
				t.Fatalf("re-encoded index: %s is %+v, want %+v", rel, e2, e)
			}
		}
	})
}

// memShard is a shard held in memory.
type memShard struct{ *bytes.Reader }

func (memShard) Close() error { return nil }

// openShardBytes indexes b as the one tar file of a dataset, as OpenWith
// would with the index file off, but in memory: nothing touches the file
// system, so a fuzz execution costs what indexing and reading b cost.
func openShardBytes(b []byte) (*Dataset, error) {
	d := &Dataset{dir: "mem", tars: true}
	ix := &indexer{ctx: context.Background(), d: d, opts: OpenOptions{Index: "-", Workers: 1}}
	ix.catalogShards([]shardFile{{name: "s.tar", r: memShard{bytes.NewReader(b)}, id: fileID{size: int64(len(b))}}})
	ix.hash()
	if err := ix.finish(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// FuzzOpenShard feeds arbitrary bytes as a tar shard: Open must fail or
// give a dataset whose every sample reads without panicking. The shard is
// indexed in memory (openShardBytes): the path from a directory to the
// open shard does not depend on its bytes, and per-execution temporary
// directories and files made each execution wait on the file system.
func FuzzOpenShard(f *testing.F) {
	var seed bytes.Buffer
	tw := tar.NewWriter(&seed)
	for _, m := range []struct{ name, data string }{{"a/x.jpg", "\xff\xd8jpeg"}, {"a/x.cls", "3"}, {"b/y.jpeg", "y"}} {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg}); err != nil {
			f.Fatal(err)
		}
		if _, err := tw.Write([]byte(m.data)); err != nil {
			f.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Fatal(err)
	}
	f.Add(seed.Bytes())
	f.Add(seed.Bytes()[:700])
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := openShardBytes(b)
		if err != nil {
			return
		}
		defer d.Close()
		for i := range d.Len() {
			got, err := d.Read(i)
			if err == nil && uint64(len(got)) != d.RawSize(i) {
				t.Fatalf("sample %d: %d bytes, catalog says %d", i, len(got), d.RawSize(i))
			}
		}
	})
}

// TestOpenShardBytesMatchesOpen: the fuzz target's in-memory open gives
// the catalog OpenWith gives for the same shard in a directory.
func TestOpenShardBytesMatchesOpen(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range []struct{ name, data string }{{"a/x.jpg", "x"}, {"a/y.jpg", "yy"}, {"b/z.jpeg", "zzz"}, {"b/z.jpg", "dup"}} {
		if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s.tar"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := OpenWith(dir, OpenOptions{Index: "-"})
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	got, err := openShardBytes(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Fingerprint() != want.Fingerprint() || !slices.Equal(got.ClassNames(), want.ClassNames()) || len(got.Skipped()) != len(want.Skipped()) {
		t.Errorf("in memory: %s %v skipped %v; from the directory: %s %v skipped %v",
			got.Fingerprint(), got.ClassNames(), got.Skipped(), want.Fingerprint(), want.ClassNames(), want.Skipped())
	}
}
