package cache

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sophon-dl/sophon/internal/atomicfile"
)

// KeySize is a key file's size: 32 bytes, e.g. `head -c 32 /dev/urandom`.
const KeySize = 32

// ErrKey marks a key file the store will not use: not a regular file, not
// KeySize bytes, readable or writable by group or others, or owned by a
// user other than the agent's and root. The cache is then off for the run.
var ErrKey = errors.New("cache: unusable key file")

// DefaultKeyFile is the key file of directory dir when Options.KeyFile is
// empty: beside the directory, outside it (DIR.key), so that whoever can
// write the directory cannot read the key unless they can also read a
// 0600 file of the agent's.
func DefaultKeyFile(dir string) string { return filepath.Clean(dir) + ".key" }

// loadKey reads the key file path, making it (KeySize random bytes, 0600,
// written whole and renamed into place) when there is none; created says
// it was made now. A file that exists but fails a check is not replaced:
// it is an error (ErrKey), the operator's to fix.
func loadKey(path string) (key []byte, created bool, err error) {
	parent, name := filepath.Split(filepath.Clean(path))
	if parent == "" {
		parent = "."
	}
	root, err := os.OpenRoot(parent)
	if err != nil {
		return nil, false, fmt.Errorf("cache: key file %s: %w", path, err)
	}
	defer root.Close()
	key, err = readKey(root, name)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			err = fmt.Errorf("cache: key file %s: %w", path, err)
		}
		return key, false, err
	}
	key = make([]byte, KeySize)
	if _, err := io.ReadFull(randReader, key); err != nil {
		return nil, false, fmt.Errorf("cache: key file %s: %w", path, err)
	}
	var rnd [6]byte
	_, _ = io.ReadFull(randReader, rnd[:])
	create := func(tmp string) (atomicfile.File, error) {
		return root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	}
	if err := atomicfile.Write(root, tmpPrefix+hex.EncodeToString(rnd[:])+"-"+name, name, key, create); err != nil {
		return nil, false, fmt.Errorf("cache: creating key file %s: %w", path, err)
	}
	if d, err := root.Open("."); err == nil { // the key outlives a crash
		_ = d.Sync()
		d.Close()
	}
	return key, true, nil
}

// readKey reads key file name beneath root: opened without following a
// symlink, checked (ErrKey) before KeySize bytes are read.
func readKey(root *os.Root, name string) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: not a regular file", ErrKey)
	case fi.Size() != KeySize:
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrKey, fi.Size(), KeySize)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%w: mode %v, want 0600 or narrower", ErrKey, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%w: owned by uid %d, want the agent's (%d) or root", ErrKey, st.Uid, os.Geteuid())
	}
	key := make([]byte, KeySize)
	if _, err := io.ReadFull(f, key); err != nil {
		return nil, err
	}
	return key, nil
}
