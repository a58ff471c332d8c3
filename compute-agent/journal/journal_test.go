package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestJournalResume: a journal with a torn last line resumes with the
// complete lines; another run's state is refused.
func TestJournalResume(t *testing.T) {
	dir := t.TempDir()
	id := RunState{Seed: 1, Fingerprint: "fp", Pipeline: "p@1", Plan: "nooff", World: 1}
	j, err := Open("", dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Write(0, []uint64{3, 1}, make([][32]byte, 2)); err != nil {
		t.Fatal(err)
	}
	if err := j.EpochDone(0); err != nil {
		t.Fatal(err)
	}
	if err := j.Write(1, []uint64{2}, make([][32]byte, 1)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	f, err := os.OpenFile(filepath.Join(dir, "samples"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("1 5 00ab") // torn by a kill
	f.Close()

	j, err = Open("", dir, id)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if !j.Complete(0) || j.Complete(1) || len(j.Delivered(0)) != 2 || len(j.Delivered(1)) != 1 {
		t.Errorf("resumed: done %v, delivered %v", j.done, j.have)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "samples"))
	if _, n, err := decode(b); err != nil || n != len(b) {
		t.Errorf("torn line not cut off: %q", b)
	}

	other := id
	other.Seed = 2
	if _, err := Open("", dir, other); !errors.Is(err, ErrUnresumable) {
		t.Errorf("another run's state: got %v, want ErrJournal", err)
	}
}

// FuzzDecodeJournal: the decoder never panics, stops only at a torn last
// line, and what it decodes encodes and decodes again to the same records.
func FuzzDecodeJournal(f *testing.F) {
	f.Add([]byte("0 1 0000000000000000000000000000000000000000000000000000000000000000\n"))
	f.Add([]byte("0 1 00\n1 2"))
	f.Add([]byte("\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, n, err := decode(b)
		if err != nil {
			return
		}
		if n > len(b) || bytes.IndexByte(b[n:], '\n') >= 0 {
			t.Fatalf("consumed %d of %d bytes with a complete line left", n, len(b))
		}
		var out []byte
		for _, r := range recs {
			out = fmt.Appendf(out, "%d %d %s\n", r.epoch, r.sample, r.sha)
		}
		again, m, err := decode(out)
		if err != nil || m != len(out) || !slices.Equal(again, recs) {
			t.Fatalf("round trip: %v %d %v, want %v", again, m, err, recs)
		}
	})
}
