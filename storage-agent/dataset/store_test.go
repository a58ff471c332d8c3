package dataset

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

type nopCloserAt struct{ *bytes.Reader }

func (nopCloserAt) Close() error { return nil }

// countingAt counts the reads that reach the object.
type countingAt struct {
	nopCloserAt
	reads int
}

func (c *countingAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	return c.nopCloserAt.ReadAt(p, off)
}

// TestWindowReader: reads through the window are the object's bytes,
// short at its end, and a walk of small reads costs one read of the
// object per window.
func TestWindowReader(t *testing.T) {
	data := make([]byte, 3*windowSize+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	under := &countingAt{nopCloserAt: nopCloserAt{bytes.NewReader(data)}}
	w := &windowReader{r: under, size: int64(len(data))}
	for off := int64(0); off < int64(len(data)); off += 512 {
		p := make([]byte, 512)
		n, err := w.ReadAt(p, off)
		want := min(512, int64(len(data))-off)
		if int64(n) != want || !bytes.Equal(p[:n], data[off:off+want]) {
			t.Fatalf("read at %d: %d bytes, want %d, or other bytes", off, n, want)
		}
		if want < 512 && !errors.Is(err, io.EOF) {
			t.Fatalf("short read at %d: %v, want EOF", off, err)
		}
	}
	if under.reads != 4 {
		t.Errorf("%d reads of the object for a walk of 512-byte reads, want 4 (one per window)", under.reads)
	}
	big := make([]byte, windowSize+1)
	if n, err := w.ReadAt(big, 7); n != len(big) || err != nil || !bytes.Equal(big, data[7:7+len(big)]) {
		t.Fatalf("read larger than the window: %d, %v", n, err)
	}
}
