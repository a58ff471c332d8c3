package dataset

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
)

// BenchmarkReadVerified prices the content check of every read against a
// read without it, a read of a file unchanged since a read that was checked
// (the default: not hashed again) and a decode of the same JPEG, for
// photo-like JPEGs of about 100 KB to 500 KB (docs/results.md, "Hash at
// read").
func BenchmarkReadVerified(b *testing.B) {
	defer func(w time.Duration) { racyWindow = w }(racyWindow)
	racyWindow = 0 // the files are seconds old, not the minutes a dataset is
	for _, sz := range []struct{ w, h int }{{640, 480}, {800, 600}, {1280, 960}} {
		dir := b.TempDir()
		img, err := synth.JPEG(7, sz.w, sz.h, synth.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "c"), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "c", "x.jpg"), img, 0o644); err != nil {
			b.Fatal(err)
		}
		d, err := OpenWith(dir, OpenOptions{Index: "-"})
		if err != nil {
			b.Fatal(err)
		}
		s := &d.samples[0]
		buf := make([]byte, s.size)
		name := fmt.Sprintf("%dKB", len(img)>>10)
		for _, c := range []struct {
			name string
			f    func() error
		}{
			{"read", func() error { _, err := d.readUnverified(s, buf); return err }},
			{"verified", func() error { d.verifyAll = true; return d.read(s, buf) }},
			{"unchanged", func() error { d.verifyAll = false; return d.read(s, buf) }},
			{"sha256", func() error { sha256.Sum256(img); return nil }},
			{"decode", func() error { _, err := ops.DecodeJPEG(img, ops.DecodeLimits{}); return err }},
		} {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(img)))
				for b.Loop() {
					if err := c.f(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		d.Close()
	}
}

// BenchmarkIndexHeaders prices reading each sample's JPEG header at
// indexing, over 1,000 photo-like JPEGs of about 100 KB to 500 KB (files
// in the page cache; docs/results.md, "Headers at indexing"): a cold
// index with and without headers (every file hashed), a version 1 index
// (hashes reused, headers read: a 64 KiB prefix of each file) and a
// version 2 one (nothing read).
func BenchmarkIndexHeaders(b *testing.B) {
	const n = 1000
	dir := b.TempDir()
	sizes := []struct{ w, h int }{{640, 480}, {800, 600}, {1024, 768}, {1280, 960}}
	var total int64
	for i := range 8 {
		sz := sizes[i%len(sizes)]
		img, err := synth.JPEG(uint64(i), sz.w, sz.h, synth.Options{})
		if err != nil {
			b.Fatal(err)
		}
		for j := i; j < n; j += 8 {
			name := filepath.Join(dir, fmt.Sprintf("c%d", j%10), fmt.Sprintf("%04d.jpg", j))
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(name, img, 0o644); err != nil {
				b.Fatal(err)
			}
			total += int64(len(img))
		}
	}
	b.Logf("%d files, %.0f KB on average", n, float64(total)/n/1000)
	idx := filepath.Join(b.TempDir(), "x.idx")
	d, err := OpenWith(dir, OpenOptions{Index: idx})
	if err != nil {
		b.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	v1, v2 := encodeIndexVersion(indexMagicV1, abs, d.samples), encodeIndex(abs, d.samples)
	d.Close()
	for _, c := range []struct {
		name  string
		opts  OpenOptions
		index []byte
	}{
		{"cold/hash", OpenOptions{Index: "-", noHeaders: true}, nil},
		{"cold/hash+headers", OpenOptions{Index: "-"}, nil},
		{"index-v1/headers", OpenOptions{Index: idx}, v1},
		{"index-v2/reuse", OpenOptions{Index: idx}, v2},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				if c.index != nil {
					b.StopTimer()
					if err := os.WriteFile(idx, c.index, 0o644); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				d, err := OpenWith(dir, c.opts)
				if err != nil {
					b.Fatal(err)
				}
				if st := d.Stats(); st.Samples != n || (c.opts.noHeaders == d.Header(0).Known()) {
					b.Fatalf("%+v, header %v", st, d.Header(0))
				}
				d.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/n, "µs/sample")
		})
	}
}
