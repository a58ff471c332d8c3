package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: the new content replaces the old whole; a failed write leaves
// the old content and no temporary file.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	create := func(tmp string) (File, error) { return root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) }
	for _, content := range []string{"old", "new content"} {
		if err := Write(root, "f.tmp", "f", []byte(content), create); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != content {
			t.Fatalf("read %q, %v; want %q", b, err, content)
		}
	}
	boom := errors.New("disk full")
	failing := func(tmp string) (File, error) {
		f, err := create(tmp)
		return badFile{f, boom}, err
	}
	if err := Write(root, "f.tmp", "f", []byte("lost"), failing); !errors.Is(err, boom) {
		t.Fatalf("error %v, want %v", err, boom)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "new content" {
		t.Errorf("after a failed write: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "f.tmp")); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
}

type badFile struct {
	File
	err error
}

func (f badFile) Sync() error { return f.err }
