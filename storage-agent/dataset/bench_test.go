package dataset

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
)

// BenchmarkReadVerified prices the content check of every read against a
// read without it and a decode of the same JPEG, for photo-like JPEGs of
// about 100 KB to 500 KB (docs/results.md, "Hash at read").
func BenchmarkReadVerified(b *testing.B) {
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
			{"read", func() error { return d.readUnverified(s, buf) }},
			{"verified", func() error { return d.read(s, buf) }},
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
