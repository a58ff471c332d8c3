// Package datasettest builds datasets on disk for tests: small synthetic
// JPEGs, ImageFolder trees, tar shards, and the hostile entries (symlinks
// out of the root, fifos, odd names, files swapped after indexing) that a
// dataset must survive.
package datasettest

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sophon-dl/sophon/ops/synth"
)

// jpegCache memoizes synthetic JPEGs: the tests build several datasets from
// the same few images.
var jpegCache sync.Map

// JPEG is a small deterministic photo-like JPEG; the size varies with the
// seed.
func JPEG(t testing.TB, seed uint64) []byte {
	t.Helper()
	if b, ok := jpegCache.Load(seed); ok {
		return b.([]byte)
	}
	w, h := 96+int(seed%5)*16, 72+int(seed%3)*24
	b, err := synth.JPEG(seed, w, h, synth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	jpegCache.Store(seed, b)
	return b
}

// SameSizeJPEG is a valid JPEG other than orig and exactly as long: a
// smaller synthetic JPEG padded with zeros after its EOI marker, which
// decoders ignore.
func SameSizeJPEG(t testing.TB, orig []byte) []byte {
	t.Helper()
	for seed := uint64(1000); seed < 1100; seed++ {
		j := JPEG(t, seed)
		if len(j) < len(orig) && !bytes.Equal(j, orig[:len(j)]) {
			return append(bytes.Clone(j), make([]byte, len(orig)-len(j))...)
		}
	}
	t.Fatalf("no synthetic JPEG under %d bytes", len(orig))
	return nil
}

// OverwriteAt writes data into name at off in place: the file keeps its
// inode and, when data ends before its end, its size.
func OverwriteAt(t testing.TB, name string, off int64, data []byte) {
	t.Helper()
	if off < 0 {
		t.Fatalf("OverwriteAt %s: negative offset", name)
	}
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	Must(t, err)
	_, err = f.WriteAt(data, off)
	Must(t, err)
	Must(t, f.Close())
}

// WriteFile writes name, creating its folders.
func WriteFile(t testing.TB, name string, data []byte) {
	t.Helper()
	Must(t, os.MkdirAll(filepath.Dir(name), 0o755))
	Must(t, os.WriteFile(name, data, 0o644))
}

// ImageFolder writes perClass JPEGs into each class folder of a new
// directory and returns it.
func ImageFolder(t testing.TB, classes []string, perClass int) string {
	t.Helper()
	dir := t.TempDir()
	seed := uint64(1)
	for _, c := range classes {
		for i := range perClass {
			WriteFile(t, filepath.Join(dir, c, "img"+string(rune('a'+i))+".jpg"), JPEG(t, seed))
			seed++
		}
	}
	return dir
}

// Member is one file of a test shard.
type Member struct {
	Name string
	Data []byte
}

// GNUPrefix on a Member's name asks for a GNU-format header (a long name
// then takes an extra entry before the member's own header).
const GNUPrefix = "gnu:"

// WriteTar writes the members, in order, as the tar file name.
func WriteTar(t testing.TB, name string, members []Member) {
	t.Helper()
	f, err := os.Create(name)
	Must(t, err)
	tw := tar.NewWriter(f)
	for _, m := range members {
		h := &tar.Header{Name: m.Name, Mode: 0o644, Size: int64(len(m.Data)), Typeflag: tar.TypeReg}
		if name, ok := strings.CutPrefix(m.Name, GNUPrefix); ok {
			h.Name, h.Format = name, tar.FormatGNU
		}
		Must(t, tw.WriteHeader(h))
		_, err := tw.Write(m.Data)
		Must(t, err)
	}
	Must(t, tw.Close())
	Must(t, f.Close())
}

// Must fails the test on a non-nil err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Symlink makes name a symlink to target, creating name's folders.
func Symlink(t testing.TB, target, name string) {
	t.Helper()
	Must(t, os.MkdirAll(filepath.Dir(name), 0o755))
	Must(t, os.Symlink(target, name))
}

// TarShards writes four tar shards, shard-0.tar to shard-3.tar, of three
// samples each (labelled by .cls members) into a new directory, or only the
// shards named in keep, and returns it.
func TarShards(t testing.TB, keep ...int) string {
	t.Helper()
	dir := t.TempDir()
	for s := range 4 {
		if keep != nil && !slices.Contains(keep, s) {
			continue
		}
		var ms []Member
		for j := range 3 {
			key := "k" + string(rune('a'+j))
			ms = append(ms, Member{key + ".jpg", JPEG(t, uint64(10*s+j))}, Member{key + ".cls", []byte{byte('0' + (s+j)%3)}})
		}
		WriteTar(t, filepath.Join(dir, "shard-"+string(rune('0'+s))+".tar"), ms)
	}
	return dir
}
