package dataset_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

func openT(t *testing.T, dir string, m *dataset.Manifest) *dataset.Dataset {
	t.Helper()
	d, err := dataset.OpenWith(dir, dataset.OpenOptions{Index: "-", Manifest: m})
	if err != nil {
		t.Fatalf("OpenWith(%s): %v", dir, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestManifestPartialTars: agents with part of the tar files and the whole
// dataset's manifest have the whole catalog: the same ids, labels, classes,
// sizes, hashes, fingerprint and layout as the full copy; they serve the
// samples they have, byte for byte, refuse the others with ErrNotStored
// and name the shards they lack.
func TestManifestPartialTars(t *testing.T) {
	full := openT(t, datasettest.TarShards(t), nil)
	l, err := full.Layout(0)
	if err != nil {
		t.Fatal(err)
	}
	b := full.Manifest().Encode()
	m, err := dataset.DecodeManifest(b)
	if err != nil {
		t.Fatalf("DecodeManifest: %v", err)
	}
	if !reflect.DeepEqual(m, full.Manifest()) {
		t.Fatal("the manifest changed through its file form")
	}
	if ml, err := m.Layout(0); err != nil || ml.Digest() != l.Digest() {
		t.Fatalf("manifest layout %v, %v; want the dataset's %v", ml.Ranges(), err, l.Ranges())
	}
	for _, keep := range [][]int{{0, 2}, {1, 3}, {3}} {
		part := openT(t, datasettest.TarShards(t, keep...), m)
		if part.Fingerprint() != full.Fingerprint() || part.Len() != full.Len() || !slices.Equal(part.ClassNames(), full.ClassNames()) {
			t.Fatalf("keep %v: fingerprint %s, %d samples, classes %v; want %s, %d, %v", keep,
				part.Fingerprint(), part.Len(), part.ClassNames(), full.Fingerprint(), full.Len(), full.ClassNames())
		}
		pl, err := part.Layout(0)
		if err != nil || pl.Digest() != l.Digest() {
			t.Fatalf("keep %v: layout %v, %v; want %v", keep, pl.Ranges(), err, l.Ranges())
		}
		var missing []int
		for s := range 4 {
			if !slices.Contains(keep, s) {
				missing = append(missing, s)
			}
		}
		if got := part.MissingShards(pl); !slices.Equal(got, missing) {
			t.Errorf("keep %v: missing shards %v, want %v", keep, got, missing)
		}
		if st := part.Stats(); st.Missing != 3*len(missing) || st.Samples != 12 {
			t.Errorf("keep %v: stats %+v, want 12 samples, %d missing", keep, st, 3*len(missing))
		}
		for i := range part.Len() {
			if part.Label(i) != full.Label(i) || part.RawSize(i) != full.RawSize(i) || part.ContentHash(i) != full.ContentHash(i) || part.Path(i) != full.Path(i) {
				t.Errorf("keep %v: sample %d differs from the full copy's", keep, i)
			}
			s, _ := pl.ShardOf(i)
			got, err := part.Read(i)
			if slices.Contains(keep, s) {
				want, _ := full.Read(i)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("keep %v: sample %d: %v, or other bytes", keep, i, err)
				}
				continue
			}
			if !errors.Is(err, dataset.ErrNotStored) {
				t.Errorf("keep %v: sample %d of missing shard %d: %v, want ErrNotStored", keep, i, s, err)
			}
			if err := part.ReadInto(i, make([]byte, part.RawSize(i))); !errors.Is(err, dataset.ErrNotStored) {
				t.Errorf("keep %v: ReadInto sample %d: %v, want ErrNotStored", keep, i, err)
			}
		}
	}
}

// TestManifestFolderMismatch: with a folder of images, a file that differs
// from the manifest is skipped and its sample (and id range) missing; a
// file the manifest does not list is skipped; a directory with none of the
// manifest's files is refused.
func TestManifestFolderMismatch(t *testing.T) {
	fullDir := datasettest.ImageFolder(t, []string{"a", "b", "c"}, 4)
	full := openT(t, fullDir, nil)
	m := full.Manifest()
	dir := t.TempDir()
	for _, rel := range []string{"a/imga.jpg", "a/imgb.jpg", "a/imgc.jpg", "a/imgd.jpg", "b/imgc.jpg", "c/imgd.jpg"} {
		b, err := os.ReadFile(filepath.Join(fullDir, rel))
		if err != nil {
			t.Fatal(err)
		}
		if rel == "b/imgc.jpg" {
			b = append(b[:len(b):len(b)], 0) // other content
		}
		datasettest.WriteFile(t, filepath.Join(dir, rel), b)
	}
	datasettest.WriteFile(t, filepath.Join(dir, "c", "extra.jpg"), datasettest.JPEG(t, 99))
	part := openT(t, dir, m)
	if part.Fingerprint() != full.Fingerprint() {
		t.Fatal("fingerprint differs from the full copy's")
	}
	skips := map[string]dataset.SkipReason{}
	for _, s := range part.Skipped() {
		skips[s.Path] = s.Reason
	}
	if want := map[string]dataset.SkipReason{"b/imgc.jpg": dataset.SkipManifestMismatch, "c/extra.jpg": dataset.SkipNotInManifest}; !reflect.DeepEqual(skips, want) {
		t.Errorf("skipped %v, want %v", skips, want)
	}
	l, err := part.Layout(4) // shards are the classes here
	if err != nil {
		t.Fatal(err)
	}
	if got := part.MissingShards(l); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("missing shards %v, want [1 2] (a complete; b with one file, which differs; c with one of four)", got)
	}
	if _, err := part.Read(6); !errors.Is(err, dataset.ErrNotStored) {
		t.Errorf("the mismatched sample: %v, want ErrNotStored", err)
	}
	if _, err := dataset.OpenWith(t.TempDir(), dataset.OpenOptions{Index: "-", Manifest: m}); !errors.Is(err, dataset.ErrLayout) {
		t.Errorf("no file of the manifest: %v, want ErrLayout", err)
	}
	if _, err := dataset.OpenWith(dir, dataset.OpenOptions{Index: "-", Manifest: m, Strict: true}); !errors.Is(err, dataset.ErrLayout) {
		t.Errorf("strict with mismatches: %v, want ErrLayout", err)
	}
}

// TestManifestPlace: the files Place lists per member hold every shard
// exactly replicas times, and agents given exactly those files hold what
// rendezvous hashing says and miss the rest.
func TestManifestPlace(t *testing.T) {
	full := openT(t, datasettest.TarShards(t), nil)
	m := full.Manifest()
	members := []string{"s1", "s2", "s3"}
	for _, r := range []int{1, 2} {
		files, err := m.Place(members, r, 0)
		if err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		for _, fs := range files {
			for _, f := range fs {
				count[f]++
			}
		}
		for s := range 4 {
			if name := "shard-" + string(rune('0'+s)) + ".tar"; count[name] != r {
				t.Errorf("R=%d: %s placed %d times", r, name, count[name])
			}
		}
		held := placement.Assign(members, 4, r)
		for _, mem := range members {
			var keep []int
			for _, f := range files[mem] {
				keep = append(keep, int(f[len("shard-")]-'0'))
			}
			if !slices.Equal(keep, held[mem]) {
				t.Errorf("R=%d: %s gets %v, rendezvous holds %v", r, mem, keep, held[mem])
			}
		}
	}
	folder := openT(t, datasettest.ImageFolder(t, []string{"a", "b"}, 3), nil).Manifest()
	files, err := folder.Place([]string{"x"}, 1, 4)
	if err != nil || !slices.Equal(files["x"], []string{"a/imga.jpg", "a/imgb.jpg", "a/imgc.jpg", "b/imga.jpg", "b/imgb.jpg", "b/imgc.jpg"}) {
		t.Errorf("folder, one member: %v, %v", files, err)
	}
}

// FuzzDecodeManifest: any bytes decode to a manifest or an ErrManifest,
// never a panic, and what decodes encodes back to the same bytes.
func FuzzDecodeManifest(f *testing.F) {
	m := &dataset.Manifest{Tars: true, Classes: []string{"0", "1"}, Samples: []dataset.ManifestSample{
		{Rel: "a.tar/x.jpg", Size: 10, Label: 1}, {Rel: "a.tar/y.jpg", Size: 3}, {Rel: "b.tar/z.jpg", Size: 7, Label: 1}}}
	f.Add(m.Encode())
	f.Add((&dataset.Manifest{Classes: []string{"c"}, Samples: []dataset.ManifestSample{{Rel: "c/p.jpg", Size: 1}}}).Encode())
	f.Add([]byte(dataset.ManifestMagic))
	f.Add(dataset.EncodeManifestV1(m))
	m.Samples[0].Header = jpegSummary(f, 500, 375)
	f.Add(m.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := dataset.DecodeManifest(b)
		if err != nil {
			if !errors.Is(err, dataset.ErrManifest) {
				t.Fatalf("error %v does not wrap ErrManifest", err)
			}
			return
		}
		if bytes.HasPrefix(b, []byte(dataset.ManifestMagicV1)) {
			// Version 1 re-encodes as version 2, with unknown headers.
			m2, err := dataset.DecodeManifest(m.Encode())
			if err != nil || !reflect.DeepEqual(m2, m) {
				t.Fatalf("version 1 manifest re-encoded: %v", err)
			}
		} else if !bytes.Equal(m.Encode(), b) {
			t.Fatal("decoded manifest encodes to other bytes")
		}
		if _, err := m.Layout(1); err != nil && !errors.Is(err, placement.ErrTooManyShards) {
			t.Fatalf("Layout of a decoded manifest: %v", err)
		}
	})
}

// TestDecodeManifestRejects: damaged or hostile manifests are refused with
// ErrManifest, naming the sample at fault.
func TestDecodeManifestRejects(t *testing.T) {
	ok := func() *dataset.Manifest {
		return &dataset.Manifest{Tars: true, Classes: []string{"0", "1"}, Samples: []dataset.ManifestSample{
			{Rel: "a.tar/x.jpg", Size: 10}, {Rel: "b.tar/y.jpg", Size: 3, Label: 1}}}
	}
	tests := map[string]func(*dataset.Manifest){
		"absolute path": func(m *dataset.Manifest) { m.Samples[0].Rel = "/a.tar/x.jpg" },
		"dot-dot":       func(m *dataset.Manifest) { m.Samples[1].Rel = "b.tar/../y.jpg" },
		"listed twice":  func(m *dataset.Manifest) { m.Samples[1].Rel = m.Samples[0].Rel },
		"not in a tar":  func(m *dataset.Manifest) { m.Samples[1].Rel = "b/y.jpg" },
		"label past":    func(m *dataset.Manifest) { m.Samples[1].Label = 2 },
		"too large":     func(m *dataset.Manifest) { m.Samples[0].Size = dataset.MaxSampleBytes + 1 },
		"tar not contiguous": func(m *dataset.Manifest) {
			m.Samples = append(m.Samples, dataset.ManifestSample{Rel: "a.tar/z.jpg"})
		},
		"no samples": func(m *dataset.Manifest) { m.Samples = nil },
	}
	for name, edit := range tests {
		m := ok()
		edit(m)
		if _, err := dataset.DecodeManifest(m.Encode()); !errors.Is(err, dataset.ErrManifest) {
			t.Errorf("%s: %v, want ErrManifest", name, err)
		}
	}
	b := ok().Encode()
	b[len(dataset.ManifestMagic)+3] ^= 1
	if _, err := dataset.DecodeManifest(b); !errors.Is(err, dataset.ErrManifest) {
		t.Errorf("a flipped bit: %v, want ErrManifest", err)
	}
	if _, err := dataset.DecodeManifest(ok().Encode()); err != nil {
		t.Errorf("the good manifest: %v", err)
	}
}

// jpegSummary is a known 3-component 4:2:0 baseline header summary of
// w x h.
func jpegSummary(tb testing.TB, w, h int) jpeg.Summary {
	tb.Helper()
	s, err := jpeg.ParseSummary([]byte{byte(w >> 8), byte(w), byte(h >> 8), byte(h), 0x80 | 0x10 | 0x05})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestManifestHeaders: a manifest carries each sample's header summary,
// an agent lacking a file serves the manifest's, a version 1 manifest
// still opens (headers read from the local files, unknown for the others)
// and a bad header byte is refused naming the sample.
func TestManifestHeaders(t *testing.T) {
	dir := datasettest.ImageFolder(t, []string{"a", "b"}, 2)
	full := openT(t, dir, nil)
	m := full.Manifest()
	for i, s := range m.Samples {
		if !s.Header.Known() || s.Header != full.Header(uint64(i)) {
			t.Fatalf("manifest sample %d: header %v, dataset %v", i, s.Header, full.Header(uint64(i)))
		}
	}
	m2, err := dataset.DecodeManifest(m.Encode())
	if err != nil || !reflect.DeepEqual(m2, m) {
		t.Fatalf("manifest round trip: %v", err)
	}
	part := t.TempDir()
	datasettest.Must(t, os.CopyFS(part, os.DirFS(dir)))
	datasettest.Must(t, os.RemoveAll(filepath.Join(part, "b")))
	d := openT(t, part, m)
	v1, err := dataset.DecodeManifest(dataset.EncodeManifestV1(m))
	if err != nil {
		t.Fatal(err)
	}
	old := openT(t, part, v1)
	for i := range d.Len() {
		if got, want := d.Header(i), full.Header(i); got != want {
			t.Errorf("sample %d: header %v with the manifest, want %v", i, got, want)
		}
		absent := i >= 2
		if got := old.Header(i); got.Known() == absent || (!absent && got != full.Header(i)) {
			t.Errorf("sample %d (absent %v): header %v with a version 1 manifest, want %v or unknown", i, absent, got, full.Header(i))
		}
	}
	b := m.Encode()
	b[len(b)-32-1] = 0xF0 // the last sample's flags: component code 3
	sum := sha256.Sum256(b[:len(b)-32])
	copy(b[len(b)-32:], sum[:])
	if _, err := dataset.DecodeManifest(b); !errors.Is(err, dataset.ErrManifest) || !errors.Is(err, jpeg.ErrSummary) || !strings.Contains(err.Error(), "sample 3") {
		t.Errorf("a bad header: %v, want ErrManifest naming sample 3", err)
	}
}
