package dataset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// fileID is what identifies the file a sample was indexed from; a read
// opens the file anew and compares.
type fileID struct {
	dev, ino uint64
	size     int64
}

func (id fileID) String() string {
	return fmt.Sprintf("(dev %d, inode %d, %d bytes)", id.dev, id.ino, id.size)
}

func idOf(fi fs.FileInfo) fileID {
	id := fileID{size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), uint64(st.Ino) //nolint:unconvert // int32 on some systems
	}
	return id
}

func mtimeOf(fi fs.FileInfo) int64 { return fi.ModTime().UnixNano() }

// ctimeOf is fi's change time (ns; 0 where the system does not give it).
func ctimeOf(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano()
	}
	return 0
}

// readDir lists dir (relative to root) sorted by name.
func readDir(root *os.Root, dir string) ([]fs.DirEntry, error) {
	f, err := root.OpenFile(dir, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

var errNotRegular = errors.New("not a regular file")

// openChecked opens rel beneath root without blocking (a fifo must not
// hang the agent) and checks that it is a regular file and, when want is
// set, the file indexed.
func openChecked(root *os.Root, rel string, want *fileID) (*os.File, fs.FileInfo, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		if want != nil {
			return nil, nil, fmt.Errorf("%w: %s is now %s", ErrChanged, DisplayName(rel), modeName(fi.Mode()))
		}
		return nil, nil, fmt.Errorf("%s is %s: %w", DisplayName(rel), modeName(fi.Mode()), errNotRegular)
	}
	if want != nil {
		if got := idOf(fi); got != *want {
			f.Close()
			return nil, nil, fmt.Errorf("%w: %s is %v, indexed %v", ErrChanged, DisplayName(rel), got, *want)
		}
	}
	return f, fi, nil
}

func modeName(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeNamedPipe != 0:
		return "a fifo"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}
