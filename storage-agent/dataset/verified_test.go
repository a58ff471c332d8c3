package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReadTrustsUnchangedFile: a loose file's read is hashed until one
// matched, then trusted while the file's change time stays the same (a
// wrong hash in the index then goes unnoticed, which is how the test sees
// the hash skipped); every read is hashed with VerifyEveryRead, and while
// the change time is younger than racyWindow; a file rewritten in place,
// same inode and size, is hashed again and refused.
func TestReadTrustsUnchangedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c", "x.jpg")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	content := []byte("not a jpeg, but bytes with a hash")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(t *testing.T, every bool) *Dataset {
		t.Helper()
		d, err := OpenWith(dir, OpenOptions{Index: "-", VerifyEveryRead: every})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if _, err := d.Read(0); err != nil {
			t.Fatalf("first read: %v", err)
		}
		d.samples[0].hash[0] ^= 0xff // the index now disagrees with the file
		return d
	}
	defer func(w time.Duration) { racyWindow = w }(racyWindow)

	t.Run("fresh change time: hashed", func(t *testing.T) {
		racyWindow = time.Hour
		if _, err := open(t, false).Read(0); !errors.Is(err, ErrChanged) {
			t.Errorf("read of a file changed within racyWindow: %v, want ErrChanged", err)
		}
	})
	t.Run("every read hashed", func(t *testing.T) {
		racyWindow = 0
		if _, err := open(t, true).Read(0); !errors.Is(err, ErrChanged) {
			t.Errorf("read with VerifyEveryRead: %v, want ErrChanged", err)
		}
	})
	t.Run("unchanged: trusted", func(t *testing.T) {
		racyWindow = 0
		d := open(t, false)
		got, err := d.Read(0)
		if err != nil || string(got) != string(content) {
			t.Errorf("read of an unchanged file: %q, %v; want it served unhashed", got, err)
		}
	})
	t.Run("rewritten in place: hashed and refused", func(t *testing.T) {
		racyWindow = 0
		d := open(t, false)
		d.samples[0].hash[0] ^= 0xff      // the index right again
		time.Sleep(50 * time.Millisecond) // past the kernel's coarse file clock's tick
		other := []byte("NOT a jpeg, but bytes with a hash")
		if err := os.WriteFile(path, other, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Read(0); !errors.Is(err, ErrChanged) {
			t.Errorf("read of a file rewritten in place: %v, want ErrChanged", err)
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
	})
}
