package storageagent

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sophon-dl/sophon/ops"
)

// wantSample is what the catalog should hold for one id.
type wantSample struct {
	path  string
	label uint32
	data  []byte
}

func checkDataset(t *testing.T, d *Dataset, classes []string, want []wantSample) {
	t.Helper()
	if got := d.ClassNames(); !slices.Equal(got, classes) {
		t.Errorf("ClassNames() = %v, want %v", got, classes)
	}
	if d.Len() != uint64(len(want)) {
		t.Fatalf("Len() = %d, want %d", d.Len(), len(want))
	}
	for i, w := range want {
		id := uint64(i)
		if got := d.Path(id); got != w.path {
			t.Errorf("Path(%d) = %q, want %q", i, got, w.path)
		}
		if got := d.Label(id); got != w.label {
			t.Errorf("Label(%d) = %d, want %d", i, got, w.label)
		}
		if got := d.RawSize(id); got != uint64(len(w.data)) {
			t.Errorf("RawSize(%d) = %d, want %d", i, got, len(w.data))
		}
	}
	// Concurrent reads return every sample's exact bytes.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i, w := range want {
				got, err := d.Read(uint64(i))
				if err != nil {
					t.Errorf("Read(%d): %v", i, err)
					return
				}
				if !bytes.Equal(got, w.data) {
					t.Errorf("Read(%d): %d bytes differ from the %d written", i, len(got), len(w.data))
				}
			}
		})
	}
	wg.Wait()
	if _, err := d.Read(d.Len()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read(Len()) = %v, want ErrNotFound", err)
	}
	if len(d.Fingerprint()) != 16 {
		t.Errorf("Fingerprint() = %q, want 16 hex digits", d.Fingerprint())
	}
}

func TestImageFolder(t *testing.T) {
	dir := t.TempDir()
	a, b, c, e := testJPEG(t, 1), testJPEG(t, 2), testJPEG(t, 3), testJPEG(t, 4)
	writeFile(t, filepath.Join(dir, "dog", "b.jpg"), b)
	writeFile(t, filepath.Join(dir, "dog", "a.JPEG"), a)
	writeFile(t, filepath.Join(dir, "dog", "notes.txt"), []byte("ignored"))
	writeFile(t, filepath.Join(dir, "cat", "sub", "z.jpg"), c)
	writeFile(t, filepath.Join(dir, "cat", "y.jpeg"), e)
	writeFile(t, filepath.Join(dir, "empty", ".keep"), nil)
	writeFile(t, filepath.Join(dir, "loose.jpg"), a) // not in a class folder
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	checkDataset(t, d, []string{"cat", "dog", "empty"}, []wantSample{
		{"cat/sub/z.jpg", 0, c},
		{"cat/y.jpeg", 0, e},
		{"dog/a.JPEG", 1, a},
		{"dog/b.jpg", 1, b},
	})
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := d.Read(0); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Close = %v, want ErrClosed", err)
	}
}

func TestTarShardsWithCls(t *testing.T) {
	dir := t.TempDir()
	a, b, c := testJPEG(t, 1), testJPEG(t, 2), testJPEG(t, 3)
	long := strings.Repeat("deep/", 30) + "x" // needs a PAX header
	// Written out of order: shards sort by name, samples keep tar order.
	writeTar(t, filepath.Join(dir, "shard-001.tar"), []tarMember{
		{"s3.cls", []byte("7\n")},
		{"s3.jpg", c},
		{gnuPrefix + long + "g.cls", []byte("1")},
		{gnuPrefix + long + "g.jpg", b},
	})
	writeTar(t, filepath.Join(dir, "shard-000.tar"), []tarMember{
		{"s2.jpg", b},
		{"s2.cls", []byte("2")},
		{"s2.json", []byte("{}")},
		{long + ".cls", []byte("0")},
		{long + ".jpeg", a},
	})
	writeFile(t, filepath.Join(dir, "README"), []byte("ignored"))
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	checkDataset(t, d, []string{"0", "1", "2", "3", "4", "5", "6", "7"}, []wantSample{
		{"shard-000.tar/s2.jpg", 2, b},
		{"shard-000.tar/" + long + ".jpeg", 0, a},
		{"shard-001.tar/s3.jpg", 7, c},
		{"shard-001.tar/" + long + "g.jpg", 1, b},
	})
}

func TestTarShardsByFolder(t *testing.T) {
	dir := t.TempDir()
	a, b, c := testJPEG(t, 1), testJPEG(t, 2), testJPEG(t, 3)
	writeTar(t, filepath.Join(dir, "train.tar"), []tarMember{
		{"./zebra/001.jpg", a},
		{"ant/002.jpg", b},
		{"zebra/003.seg.jpg", a}, // WebDataset: key zebra/003, field seg.jpg, not the image
		{"zebra/003.JPG", c},
	})
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	checkDataset(t, d, []string{"ant", "zebra"}, []wantSample{
		{"train.tar/zebra/001.jpg", 1, a},
		{"train.tar/ant/002.jpg", 0, b},
		{"train.tar/zebra/003.JPG", 1, c},
	})
}

func TestOpenRejects(t *testing.T) {
	img := testJPEG(t, 1)
	for _, tc := range []struct {
		name  string
		build func(dir string)
	}{
		{"missing dir", func(dir string) { os.Remove(dir) }},
		{"empty", func(string) {}},
		{"mixed cls", func(dir string) {
			writeTar(t, filepath.Join(dir, "a.tar"), []tarMember{{"x.jpg", img}, {"x.cls", []byte("1")}, {"y.jpg", img}})
		}},
		{"bad cls", func(dir string) {
			writeTar(t, filepath.Join(dir, "a.tar"), []tarMember{{"x.jpg", img}, {"x.cls", []byte("cat")}})
		}},
		{"two images", func(dir string) {
			writeTar(t, filepath.Join(dir, "a.tar"), []tarMember{{"x.jpg", img}, {"x.jpeg", img}})
		}},
		{"not a tar", func(dir string) { writeFile(t, filepath.Join(dir, "a.tar"), bytes.Repeat([]byte{7}, 1000)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.build(dir)
			if d, err := OpenWith(dir, OpenOptions{Strict: true, Index: "-"}); err == nil {
				d.Close()
				t.Fatalf("strict Open succeeded, want an error")
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	classes := []string{"a", "b"}
	fp := func(dir string) string {
		t.Helper()
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		return d.Fingerprint()
	}
	dir := imageFolder(t, classes, 3)
	base := fp(dir)
	if again := fp(dir); again != base {
		t.Fatalf("fingerprint changed on reopening: %s then %s", base, again)
	}
	if other := fp(imageFolder(t, classes, 3)); other != base {
		t.Errorf("same files elsewhere: fingerprint %s, want %s", other, base)
	}
	for _, tc := range []struct {
		name   string
		change func(dir string)
	}{
		{"label", func(dir string) { os.Rename(filepath.Join(dir, "a", "imga.jpg"), filepath.Join(dir, "b", "imga.jpg")) }},
		{"size", func(dir string) { writeFile(t, filepath.Join(dir, "a", "imga.jpg"), testJPEG(t, 40)) }},
		{"name", func(dir string) { os.Rename(filepath.Join(dir, "a", "imga.jpg"), filepath.Join(dir, "a", "imgz.jpg")) }},
		{"added", func(dir string) { writeFile(t, filepath.Join(dir, "b", "new.jpg"), testJPEG(t, 1)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := imageFolder(t, classes, 3)
			tc.change(dir)
			if got := fp(dir); got == base {
				t.Errorf("fingerprint unchanged (%s)", got)
			}
		})
	}
}

func TestReadTooLargeAndIO(t *testing.T) {
	dir := imageFolder(t, []string{"a"}, 2)
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	os.Remove(filepath.Join(dir, "a", "imgb.jpg"))
	_, err = d.Read(1)
	if !errors.Is(err, ErrRead) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read of a removed file = %v, want ErrRead wrapping ErrNotExist", err)
	}
	if got := errorKind(err); got.String() != "ERROR_KIND_IO" {
		t.Errorf("errorKind = %v, want IO", got)
	}
	d.samples[0].size = MaxSampleBytes + 1
	if _, err := d.Read(0); !errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("Read of a huge sample = %v, want ops.ErrTooLarge", err)
	}
}

func TestTruncatedShard(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "a.tar")
	writeTar(t, name, []tarMember{{"x.jpg", testJPEG(t, 1)}, {"y.jpg", testJPEG(t, 2)}})
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, name, b[:len(b)-1024-512-100]) // cut inside y.jpg
	if d, err := OpenWith(dir, OpenOptions{Strict: true}); err == nil {
		d.Close()
		t.Fatal("strict Open of a cut shard succeeded")
	}
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Len() != 1 || d.Path(0) != "a.tar/x.jpg" || d.Stats().Skipped[SkipCutShard] != 1 {
		t.Errorf("cut shard: %d samples, skipped %v; want x.jpg served and the cut counted", d.Len(), d.Skipped())
	}
}

// FuzzOpenShard feeds arbitrary bytes as a tar shard: Open must fail or
// give a dataset whose every sample reads without panicking.
func FuzzOpenShard(f *testing.F) {
	dir := f.TempDir()
	writeTar(f, filepath.Join(dir, "seed.tar"), []tarMember{{"a/x.jpg", []byte("\xff\xd8jpeg")}, {"a/x.cls", []byte("3")}, {"b/y.jpeg", []byte("y")}})
	seed, err := os.ReadFile(filepath.Join(dir, "seed.tar"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add(seed[:700])
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "s.tar"), b)
		d, err := OpenWith(dir, OpenOptions{Index: "-"})
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
