package dataset_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

// wantSample is what the catalog should hold for one id.
type wantSample struct {
	path  string
	label uint32
	data  []byte
}

func checkDataset(t *testing.T, d *dataset.Dataset, classes []string, want []wantSample) {
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
	if _, err := d.Read(d.Len()); !errors.Is(err, dataset.ErrNotFound) {
		t.Errorf("Read(Len()) = %v, want ErrNotFound", err)
	}
	if len(d.Fingerprint()) != 16 {
		t.Errorf("Fingerprint() = %q, want 16 hex digits", d.Fingerprint())
	}
}

func TestImageFolder(t *testing.T) {
	dir := t.TempDir()
	a, b, c, e := datasettest.JPEG(t, 1), datasettest.JPEG(t, 2), datasettest.JPEG(t, 3), datasettest.JPEG(t, 4)
	datasettest.WriteFile(t, filepath.Join(dir, "dog", "b.jpg"), b)
	datasettest.WriteFile(t, filepath.Join(dir, "dog", "a.JPEG"), a)
	datasettest.WriteFile(t, filepath.Join(dir, "dog", "notes.txt"), []byte("ignored"))
	datasettest.WriteFile(t, filepath.Join(dir, "cat", "sub", "z.jpg"), c)
	datasettest.WriteFile(t, filepath.Join(dir, "cat", "y.jpeg"), e)
	datasettest.WriteFile(t, filepath.Join(dir, "empty", ".keep"), nil)
	datasettest.WriteFile(t, filepath.Join(dir, "loose.jpg"), a) // not in a class folder
	d, err := dataset.Open(dir)
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
	if _, err := d.Read(0); !errors.Is(err, dataset.ErrClosed) {
		t.Errorf("Read after Close = %v, want ErrClosed", err)
	}
}

func TestTarShardsWithCls(t *testing.T) {
	dir := t.TempDir()
	a, b, c := datasettest.JPEG(t, 1), datasettest.JPEG(t, 2), datasettest.JPEG(t, 3)
	long := strings.Repeat("deep/", 30) + "x" // needs a PAX header
	// Written out of order: shards sort by name, samples keep tar order.
	datasettest.WriteTar(t, filepath.Join(dir, "shard-001.tar"), []datasettest.Member{
		{Name: "s3.cls", Data: []byte("7\n")},
		{Name: "s3.jpg", Data: c},
		{Name: datasettest.GNUPrefix + long + "g.cls", Data: []byte("1")},
		{Name: datasettest.GNUPrefix + long + "g.jpg", Data: b},
	})
	datasettest.WriteTar(t, filepath.Join(dir, "shard-000.tar"), []datasettest.Member{
		{Name: "s2.jpg", Data: b},
		{Name: "s2.cls", Data: []byte("2")},
		{Name: "s2.json", Data: []byte("{}")},
		{Name: long + ".cls", Data: []byte("0")},
		{Name: long + ".jpeg", Data: a},
	})
	datasettest.WriteFile(t, filepath.Join(dir, "README"), []byte("ignored"))
	d, err := dataset.Open(dir)
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
	a, b, c := datasettest.JPEG(t, 1), datasettest.JPEG(t, 2), datasettest.JPEG(t, 3)
	datasettest.WriteTar(t, filepath.Join(dir, "train.tar"), []datasettest.Member{
		{Name: "./zebra/001.jpg", Data: a},
		{Name: "ant/002.jpg", Data: b},
		{Name: "zebra/003.seg.jpg", Data: a}, // WebDataset: key zebra/003, field seg.jpg, not the image
		{Name: "zebra/003.JPG", Data: c},
	})
	d, err := dataset.Open(dir)
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
	img := datasettest.JPEG(t, 1)
	for _, tc := range []struct {
		name  string
		build func(dir string)
	}{
		{"missing dir", func(dir string) { os.Remove(dir) }},
		{"empty", func(string) {}},
		{"mixed cls", func(dir string) {
			datasettest.WriteTar(t, filepath.Join(dir, "a.tar"), []datasettest.Member{{Name: "x.jpg", Data: img}, {Name: "x.cls", Data: []byte("1")}, {Name: "y.jpg", Data: img}})
		}},
		{"bad cls", func(dir string) {
			datasettest.WriteTar(t, filepath.Join(dir, "a.tar"), []datasettest.Member{{Name: "x.jpg", Data: img}, {Name: "x.cls", Data: []byte("cat")}})
		}},
		{"two images", func(dir string) {
			datasettest.WriteTar(t, filepath.Join(dir, "a.tar"), []datasettest.Member{{Name: "x.jpg", Data: img}, {Name: "x.jpeg", Data: img}})
		}},
		{"not a tar", func(dir string) { datasettest.WriteFile(t, filepath.Join(dir, "a.tar"), bytes.Repeat([]byte{7}, 1000)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.build(dir)
			if d, err := dataset.OpenWith(dir, dataset.OpenOptions{Strict: true, Index: "-"}); err == nil {
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
		d, err := dataset.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		return d.Fingerprint()
	}
	dir := datasettest.ImageFolder(t, classes, 3)
	base := fp(dir)
	if again := fp(dir); again != base {
		t.Fatalf("fingerprint changed on reopening: %s then %s", base, again)
	}
	if other := fp(datasettest.ImageFolder(t, classes, 3)); other != base {
		t.Errorf("same files elsewhere: fingerprint %s, want %s", other, base)
	}
	for _, tc := range []struct {
		name   string
		change func(dir string)
	}{
		{"label", func(dir string) { os.Rename(filepath.Join(dir, "a", "imga.jpg"), filepath.Join(dir, "b", "imga.jpg")) }},
		{"size", func(dir string) {
			datasettest.WriteFile(t, filepath.Join(dir, "a", "imga.jpg"), datasettest.JPEG(t, 40))
		}},
		{"name", func(dir string) { os.Rename(filepath.Join(dir, "a", "imga.jpg"), filepath.Join(dir, "a", "imgz.jpg")) }},
		{"added", func(dir string) { datasettest.WriteFile(t, filepath.Join(dir, "b", "new.jpg"), datasettest.JPEG(t, 1)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := datasettest.ImageFolder(t, classes, 3)
			tc.change(dir)
			if got := fp(dir); got == base {
				t.Errorf("fingerprint unchanged (%s)", got)
			}
		})
	}
}

func TestReadRemoved(t *testing.T) {
	dir := datasettest.ImageFolder(t, []string{"a"}, 2)
	d, err := dataset.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	os.Remove(filepath.Join(dir, "a", "imgb.jpg"))
	_, err = d.Read(1)
	if !errors.Is(err, dataset.ErrRead) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read of a removed file = %v, want ErrRead wrapping ErrNotExist", err)
	}
}

func TestTruncatedShard(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "a.tar")
	datasettest.WriteTar(t, name, []datasettest.Member{{Name: "x.jpg", Data: datasettest.JPEG(t, 1)}, {Name: "y.jpg", Data: datasettest.JPEG(t, 2)}})
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	datasettest.WriteFile(t, name, b[:len(b)-1024-512-100]) // cut inside y.jpg
	if d, err := dataset.OpenWith(dir, dataset.OpenOptions{Strict: true}); err == nil {
		d.Close()
		t.Fatal("strict Open of a cut shard succeeded")
	}
	d, err := dataset.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Len() != 1 || d.Path(0) != "a.tar/x.jpg" || d.Stats().Skipped[dataset.SkipCutShard] != 1 {
		t.Errorf("cut shard: %d samples, skipped %v; want x.jpg served and the cut counted", d.Len(), d.Skipped())
	}
}

// TestOpenContextInterrupted: an open whose context has ended fails with
// ErrInterrupted and leaves no index file behind; for a folder of images
// and for tar shards.
func TestOpenContextInterrupted(t *testing.T) {
	for name, dir := range map[string]string{"folder": datasettest.ImageFolder(t, []string{"a", "b"}, 3), "tar": datasettest.TarShards(t)} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := dataset.OpenContext(ctx, dir, dataset.OpenOptions{})
			if !errors.Is(err, dataset.ErrInterrupted) || !errors.Is(err, context.Canceled) {
				t.Fatalf("open with an ended context: %v, want ErrInterrupted, context.Canceled", err)
			}
			if _, err := os.Stat(filepath.Join(dir, ".sophon-index")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("an interrupted open wrote the index file (%v)", err)
			}
			d, err := dataset.OpenContext(context.Background(), dir, dataset.OpenOptions{})
			if err != nil {
				t.Fatalf("open after the interrupted one: %v", err)
			}
			d.Close()
		})
	}
}
