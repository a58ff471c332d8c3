package storageagent

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sophon-dl/sophon/ops"
)

// Errors returned by the dataset. The server maps them to per-sample error
// kinds.
var (
	// ErrNotFound: the sample id is not in the catalog.
	ErrNotFound = errors.New("storageagent: sample not found")
	// ErrRead: reading a sample's bytes failed; the underlying I/O error is
	// wrapped beside it.
	ErrRead = errors.New("storageagent: read failed")
	// ErrLayout: the directory is neither an ImageFolder nor a set of
	// WebDataset shards the agent can serve.
	ErrLayout = errors.New("storageagent: bad dataset layout")
	// ErrClosed: the dataset was closed.
	ErrClosed = errors.New("storageagent: dataset closed")
)

// MaxSampleBytes bounds one sample's raw size. A larger sample fails with
// ops.ErrTooLarge when read (it is data, not a reason to stop serving).
const MaxSampleBytes = 1 << 30

// sample is one catalog entry. shard is -1 for a loose file (ImageFolder),
// otherwise an index into Dataset.shards with off the member's data offset.
type sample struct {
	rel   string // slash-separated path relative to the dataset directory
	shard int
	off   int64
	size  int64
	label uint32
}

// Dataset is a read-only set of samples opened from a directory. Sample ids
// are dense, 0..Len()-1, in a fixed order; clients never name paths.
//
// Two layouts are served:
//
//   - WebDataset-style shards: the directory holds *.tar files (sorted by
//     name; other files are ignored). Members whose base names share the part
//     before the first dot form one sample (WebDataset's key rule, so
//     "a/x.jpg" and "a/x.cls" are sample "a/x", and "a/x.seg.jpg" is its
//     field "seg.jpg", not its image). The image is the .jpg or .jpeg member
//     (any case); the label is the .cls member's decimal text when every
//     sample has one (class names are then "0".."max"), otherwise the
//     member's parent folder name, with folder names sorted into labels
//     0..C-1. A mix of samples with and without .cls is refused. Samples are
//     ordered by shard, then by the position of their image in the shard.
//     Each shard is indexed once at Open by walking its tar headers; reads use
//     the remembered offsets.
//   - ImageFolder: otherwise, each subdirectory is a class (sorted by name,
//     labels 0..C-1) and the *.jpg / *.jpeg files below it (any depth, case
//     of the extension ignored, sorted by path) are its samples, ordered by
//     class and then path.
//
// A Dataset is safe for concurrent use.
type Dataset struct {
	dir     string
	samples []sample
	classes []string
	fp      string

	mu     sync.RWMutex // guards shards against Close
	shards []*os.File
	closed bool
}

// Open indexes the dataset in dir. It fails when dir holds no samples.
func Open(dir string) (*Dataset, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("storageagent: open dataset: %w", err)
	}
	var tars []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(strings.ToLower(e.Name()), ".tar") {
			tars = append(tars, e.Name())
		}
	}
	d := &Dataset{dir: dir}
	if len(tars) > 0 {
		err = d.indexShards(tars)
	} else {
		err = d.indexFolders(ents)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	if len(d.samples) == 0 {
		d.Close()
		return nil, fmt.Errorf("%w: no samples in %s", ErrLayout, dir)
	}
	d.fp = fingerprint(d.samples)
	return d, nil
}

func isJPEGName(name string) bool {
	ext := strings.ToLower(path.Ext(name))
	return ext == ".jpg" || ext == ".jpeg"
}

func (d *Dataset) indexFolders(ents []fs.DirEntry) error {
	for _, e := range ents {
		if isDirEntry(d.dir, e) {
			d.classes = append(d.classes, e.Name())
		}
	}
	slices.Sort(d.classes)
	for label, class := range d.classes {
		var files []sample
		root := filepath.Join(d.dir, class)
		err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() || !isJPEGName(e.Name()) {
				return nil
			}
			info, err := os.Stat(p) // follows a symlink to its file
			if err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(d.dir, p)
			if err != nil {
				return err
			}
			files = append(files, sample{rel: filepath.ToSlash(rel), shard: -1, size: info.Size(), label: uint32(label)})
			return nil
		})
		if err != nil {
			return fmt.Errorf("storageagent: index class %q: %w", class, err)
		}
		slices.SortFunc(files, func(a, b sample) int { return strings.Compare(a.rel, b.rel) })
		d.samples = append(d.samples, files...)
	}
	return nil
}

// isDirEntry reports whether e is a directory or a symlink to one.
func isDirEntry(dir string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	info, err := os.Stat(filepath.Join(dir, e.Name()))
	return err == nil && info.IsDir()
}

// member is a sample found in a shard while indexing it.
type member struct {
	key       string
	image     string // member name of the image
	off, size int64
	hasImage  bool
	cls       string // the .cls text, if any
	hasCls    bool
}

func (d *Dataset) indexShards(names []string) error {
	slices.Sort(names)
	type found struct {
		shard int
		m     *member
	}
	var all []found
	for si, name := range names {
		f, err := os.Open(filepath.Join(d.dir, name))
		if err != nil {
			return fmt.Errorf("storageagent: open shard: %w", err)
		}
		d.shards = append(d.shards, f)
		members, err := indexShard(f)
		if err != nil {
			return fmt.Errorf("%w: shard %s: %v", ErrLayout, name, err)
		}
		for _, m := range members {
			all = append(all, found{si, m})
		}
	}
	withCls := 0
	for _, x := range all {
		if x.m.hasCls {
			withCls++
		}
	}
	switch {
	case withCls == len(all):
		maxLabel := -1
		for _, x := range all {
			v, err := strconv.ParseUint(strings.TrimSpace(x.m.cls), 10, 31)
			if err != nil {
				return fmt.Errorf("%w: shard %s: sample %s: .cls %q is not a class number", ErrLayout, names[x.shard], x.m.key, x.m.cls)
			}
			maxLabel = max(maxLabel, int(v))
			d.samples = append(d.samples, shardSample(names[x.shard], x.shard, x.m, uint32(v)))
		}
		for i := 0; i <= maxLabel; i++ {
			d.classes = append(d.classes, strconv.Itoa(i))
		}
	case withCls == 0:
		set := map[string]bool{}
		for _, x := range all {
			set[path.Base(path.Dir(x.m.key))] = true
		}
		for c := range set {
			d.classes = append(d.classes, c)
		}
		slices.Sort(d.classes)
		labels := make(map[string]uint32, len(d.classes))
		for i, c := range d.classes {
			labels[c] = uint32(i)
		}
		for _, x := range all {
			d.samples = append(d.samples, shardSample(names[x.shard], x.shard, x.m, labels[path.Base(path.Dir(x.m.key))]))
		}
	default:
		return fmt.Errorf("%w: %d of %d samples have a .cls member; all or none must", ErrLayout, withCls, len(all))
	}
	return nil
}

func shardSample(shardName string, shard int, m *member, label uint32) sample {
	return sample{rel: shardName + "/" + m.image, shard: shard, off: m.off, size: m.size, label: label}
}

// maxClsBytes bounds a .cls member read while indexing.
const maxClsBytes = 64

// indexShard walks f's tar headers once and returns its samples in the
// order of their images. NB: tar.Reader reads a header without reading
// ahead, so right after Next the file's offset is the member's first data
// byte; it skips unread data with Seek, so indexing does not read images.
func indexShard(f *os.File) ([]*member, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(f)
	byKey := map[string]*member{}
	var order []*member
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(path.Clean(h.Name), "./")
		base := path.Base(name)
		dot := strings.IndexByte(base, '.')
		if dot <= 0 {
			continue
		}
		key := path.Join(path.Dir(name), base[:dot])
		ext := strings.ToLower(base[dot:])
		m := byKey[key]
		if m == nil {
			m = &member{key: key}
			byKey[key] = m
		}
		switch {
		case ext == ".jpg" || ext == ".jpeg":
			if m.hasImage {
				return nil, fmt.Errorf("sample %s has two images (%s, %s)", key, m.image, name)
			}
			off, err := f.Seek(0, io.SeekCurrent)
			if err != nil {
				return nil, err
			}
			if h.Size > fi.Size()-off {
				// NB: the reader seeks over data, so a cut shard shows
				// only here.
				return nil, fmt.Errorf("member %s: %d bytes at offset %d overrun the %d-byte shard", name, h.Size, off, fi.Size())
			}
			m.image, m.off, m.size, m.hasImage = name, off, h.Size, true
			order = append(order, m)
		case ext == ".cls":
			b, err := io.ReadAll(io.LimitReader(tr, maxClsBytes+1))
			if err != nil {
				return nil, err
			}
			if len(b) > maxClsBytes {
				return nil, fmt.Errorf("sample %s: .cls member longer than %d bytes", key, maxClsBytes)
			}
			m.cls, m.hasCls = string(b), true
		}
	}
	return order, nil
}

// fingerprint is the first 16 hex digits of the SHA-256 over every
// sample's relative path, size and label, in id order.
func fingerprint(samples []sample) string {
	h := sha256.New()
	var buf []byte
	for _, s := range samples {
		buf = buf[:0]
		buf = append(buf, s.rel...)
		buf = append(buf, 0)
		buf = strconv.AppendInt(buf, s.size, 10)
		buf = append(buf, 0)
		buf = strconv.AppendUint(buf, uint64(s.label), 10)
		buf = append(buf, '\n')
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Dir is the directory the dataset was opened from.
func (d *Dataset) Dir() string { return d.dir }

// Len is the number of samples.
func (d *Dataset) Len() uint64 { return uint64(len(d.samples)) }

// Label is sample i's class; i must be below Len.
func (d *Dataset) Label(i uint64) uint32 { return d.samples[i].label }

// RawSize is sample i's size in bytes; i must be below Len.
func (d *Dataset) RawSize(i uint64) uint64 { return uint64(d.samples[i].size) }

// Path is sample i's location relative to the dataset directory (for a
// shard member, the shard's name, a slash and the member's name).
func (d *Dataset) Path(i uint64) string { return d.samples[i].rel }

// ClassNames are the class names, indexed by label.
func (d *Dataset) ClassNames() []string { return slices.Clone(d.classes) }

// Fingerprint identifies the catalog: the first 16 hex digits of the
// SHA-256 over every sample's relative path, size and label, in id order.
// Two agents with the same fingerprint serve the same samples under the same
// ids.
func (d *Dataset) Fingerprint() string { return d.fp }

// Read returns sample i's bytes. An id out of range gives ErrNotFound; a
// failed read gives ErrRead wrapped with the cause; a sample above
// MaxSampleBytes gives ops.ErrTooLarge. Error messages start with
// "sample i".
func (d *Dataset) Read(i uint64) ([]byte, error) {
	if i >= uint64(len(d.samples)) {
		return nil, fmt.Errorf("sample %d: %w (the catalog holds %d)", i, ErrNotFound, len(d.samples))
	}
	s := &d.samples[i]
	if s.size > MaxSampleBytes {
		return nil, fmt.Errorf("sample %d (%s): %w: %d bytes, limit %d", i, s.rel, ops.ErrTooLarge, s.size, MaxSampleBytes)
	}
	buf := make([]byte, s.size)
	if err := d.read(s, buf); err != nil {
		return nil, fmt.Errorf("sample %d (%s): %w: %w", i, s.rel, ErrRead, err)
	}
	return buf, nil
}

// ReadInto reads sample i into buf, which must be exactly RawSize(i) long:
// the storage agent reads raw fetches straight into their wire form.
func (d *Dataset) ReadInto(i uint64, buf []byte) error {
	if i >= uint64(len(d.samples)) {
		return fmt.Errorf("sample %d: %w (the catalog holds %d)", i, ErrNotFound, len(d.samples))
	}
	s := &d.samples[i]
	if int64(len(buf)) != s.size {
		return fmt.Errorf("sample %d (%s): buffer of %d bytes for a %d-byte sample", i, s.rel, len(buf), s.size)
	}
	if err := d.read(s, buf); err != nil {
		return fmt.Errorf("sample %d (%s): %w: %w", i, s.rel, ErrRead, err)
	}
	return nil
}

func readFile(name string, buf []byte) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return readFull(f, buf, 0)
}

func (d *Dataset) read(s *sample, buf []byte) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	if s.shard < 0 {
		return readFile(filepath.Join(d.dir, filepath.FromSlash(s.rel)), buf)
	}
	return readFull(d.shards[s.shard], buf, s.off)
}

// readFull fills buf from r at off; a short read is io.ErrUnexpectedEOF.
func readFull(r io.ReaderAt, buf []byte, off int64) error {
	n, err := r.ReadAt(buf, off)
	if n == len(buf) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// Close releases the shard files; reads after it fail with ErrClosed. Close
// is safe to call twice.
func (d *Dataset) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for _, f := range d.shards {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
