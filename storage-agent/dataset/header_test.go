package dataset

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/synth"
)

// headerCase is one file of TestHeaders and the summary it must get.
type headerCase struct {
	name string
	data []byte
	want string // jpeg.Summary.String()
}

// headerCases are JPEGs of each kind the encoder writes, and files whose
// header is unknown: garbage, a cut header, a header past MaxHeaderPrefix.
func headerCases(t *testing.T) []headerCase {
	enc := func(w, h int, opt synth.Options) []byte {
		b, err := synth.JPEG(3, w, h, opt)
		if err != nil {
			return nil // a kind the pure-Go backend cannot write
		}
		return b
	}
	base := enc(333, 251, synth.Options{})
	// An APP15 segment of 65533 bytes before the frame: the header ends
	// past the prefix read.
	big := append([]byte{0xFF, 0xD8, 0xFF, 0xEF, 0xFF, 0xFF}, make([]byte, 0xFFFD)...)
	big = append(big, base[2:]...)
	cs := []headerCase{
		{"base.jpg", base, "333x251 3c mcu 16x16"},
		{"gray.jpg", enc(150, 100, synth.Options{Gray: true}), "150x100 1c mcu 8x8"},
		{"p444.jpg", enc(257, 181, synth.Options{Progressive: true, Subsampling: 444}), "257x181 3c mcu 8x8 progressive"},
		{"s422.jpg", enc(257, 181, synth.Options{Subsampling: 422}), "257x181 3c mcu 16x8"},
		{"garbage.jpg", []byte("not a jpeg at all"), "unknown"},
		{"cut.jpg", base[:100], "unknown"},
		{"big-app.jpg", big, "unknown"},
	}
	if h, err := jpeg.ReadHeader(big); err != nil || h.W != 333 {
		t.Fatalf("the big-APP file's whole header: %+v, %v", h, err)
	}
	var out []headerCase
	for _, c := range cs {
		if c.data != nil {
			out = append(out, c)
		}
	}
	return out
}

// TestHeaders: indexing reads each sample's header from its first bytes,
// for loose files and tar members; a file without a header that parses in
// MaxHeaderPrefix bytes is unknown and still served.
func TestHeaders(t *testing.T) {
	cases := headerCases(t)
	folder := t.TempDir()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, c := range cases {
		writeT(t, filepath.Join(folder, "c", c.name), c.data)
		must(t, tw.WriteHeader(&tar.Header{Name: "c/" + c.name, Mode: 0o644, Size: int64(len(c.data)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(c.data)
		must(t, err)
	}
	must(t, tw.Close())
	shards := t.TempDir()
	writeT(t, filepath.Join(shards, "s.tar"), tb.Bytes())
	for _, dir := range []string{folder, shards} {
		d, err := OpenWith(dir, OpenOptions{Index: "-"})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		unknown := 0
		for _, c := range cases {
			if c.want == "unknown" {
				unknown++
			}
		}
		if st := d.Stats(); st.HeadersUnknown != unknown {
			t.Errorf("%s: %d headers unknown, want %d", dir, st.HeadersUnknown, unknown)
		}
		if d.Len() != uint64(len(cases)) || d.Stats().HeadersRead != len(cases) {
			t.Fatalf("%s: %d samples, %d headers read; want %d", dir, d.Len(), d.Stats().HeadersRead, len(cases))
		}
		for i := range d.Len() {
			c := byName(t, cases, d.RawPath(i))
			if got := d.Header(i).String(); got != c.want {
				t.Errorf("%s: header %s, want %s", d.RawPath(i), got, c.want)
			}
			if b, err := d.Read(i); err != nil || !bytes.Equal(b, c.data) {
				t.Errorf("%s: read %d bytes, %v", d.RawPath(i), len(b), err)
			}
		}
	}
}

func byName(t *testing.T, cs []headerCase, rel string) headerCase {
	for _, c := range cs {
		if filepath.Base(rel) == c.name {
			return c
		}
	}
	t.Fatalf("no case for %s", rel)
	return headerCase{}
}

// TestIndexHeaders: the index keeps headers (unknown ones too), so a
// restart reads none; a version 1 index is re-read, its hashes reused and
// its headers read again, then rewritten as version 2.
func TestIndexHeaders(t *testing.T) {
	cases := headerCases(t)
	dir := t.TempDir()
	for _, c := range cases {
		writeT(t, filepath.Join(dir, "c", c.name), c.data)
	}
	idx := filepath.Join(t.TempDir(), "x.idx")
	open := func() *Dataset {
		d, err := OpenWith(dir, OpenOptions{Index: idx})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	first := open()
	if st := first.Stats(); st.Hashed != len(cases) || st.HeadersRead != len(cases) {
		t.Fatalf("first open: %+v", st)
	}
	second := open()
	if st := second.Stats(); st.Hashed != 0 || st.HeadersRead != 0 || st.Reused != len(cases) {
		t.Fatalf("second open: %+v, want every hash and header from the index", st)
	}
	sameHeaders(t, first, second)

	abs, err := filepath.Abs(dir)
	must(t, err)
	must(t, os.WriteFile(idx, encodeIndexVersion(indexMagicV1, abs, first.samples), 0o644))
	old := open()
	if st := old.Stats(); st.Hashed != 0 || st.Reused != len(cases) || st.HeadersRead != len(cases) {
		t.Fatalf("version 1 index: %+v, want hashes reused and headers read", st)
	}
	sameHeaders(t, first, old)
	if b, _ := os.ReadFile(idx); !bytes.HasPrefix(b, []byte(indexMagic)) {
		t.Fatalf("the version 1 index was not rewritten: starts %q", b[:min(len(b), 15)])
	}
	if st := open().Stats(); st.HeadersRead != 0 || st.Reused != len(cases) {
		t.Fatalf("after the rewrite: %+v", st)
	}
}

func sameHeaders(t *testing.T, a, b *Dataset) {
	t.Helper()
	for i := range a.Len() {
		if a.Header(i) != b.Header(i) || a.RawPath(i) != b.RawPath(i) {
			t.Errorf("sample %d: header %v, then %v", i, a.Header(i), b.Header(i))
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeT writes name, creating its folders.
func writeT(t *testing.T, name string, data []byte) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(name), 0o755))
	must(t, os.WriteFile(name, data, 0o644))
}
