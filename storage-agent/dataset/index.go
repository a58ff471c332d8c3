package dataset

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sophon-dl/sophon/internal/atomicfile"
	"github.com/sophon-dl/sophon/ops/jpeg"
)

// The index file keeps each sample's content hash and JPEG header summary
// between runs, so a restart hashes and parses only what changed. Its
// layout (integers are uvarints unless noted):
//
//	"sophon-index 2\n"
//	len(dir) dir                        the absolute data directory
//	n                                   entries
//	n x: len(rel) rel size off ino mtime(varint) hash[32] header[5]
//	SHA-256 of everything above [32]
//
// header is the sample's jpeg.Summary in its binary form (all zero when
// unknown). Version 1 is the same without header: its hashes are reused
// and its samples' headers read again (a prefix of each file), and the
// file is rewritten as version 2. A file that fails any check (magic,
// checksum, bounds, another directory) is ignored with a warning and
// rewritten.
const (
	indexMagic   = "sophon-index 2\n"
	indexMagicV1 = "sophon-index 1\n"
	// indexName is the default index file inside the data directory.
	indexName = ".sophon-index"
	// maxIndexBytes bounds the index file read.
	maxIndexBytes = 1 << 34
	// minIndexEntry is an entry's least size: five one-byte varints and
	// the hash (version 1; version 2 adds the header).
	minIndexEntry = 5 + 32
)

// indexEntry is what the index remembers of one sample.
type indexEntry struct {
	size, off, ino uint64
	mtime          int64
	hash           [32]byte
	// hdr is the header summary; hasHdr is false for a version 1 file,
	// which has none.
	hdr    jpeg.Summary
	hasHdr bool
}

var errIndex = errors.New("dataset: bad index file")

// encodeIndex is the index file for dir's samples.
func encodeIndex(dir string, samples []sample) []byte {
	return encodeIndexVersion(indexMagic, dir, samples)
}

// encodeIndexVersion is encodeIndex under magic: with indexMagicV1, the
// version 1 file (no headers) that agents before headers wrote, which the
// tests of its reading make this way.
func encodeIndexVersion(magic, dir string, samples []sample) []byte {
	b := []byte(magic)
	b = binary.AppendUvarint(b, uint64(len(dir)))
	b = append(b, dir...)
	b = binary.AppendUvarint(b, uint64(len(samples)))
	for _, s := range samples {
		b = binary.AppendUvarint(b, uint64(len(s.rel)))
		b = append(b, s.rel...)
		b = binary.AppendUvarint(b, uint64(s.size))
		b = binary.AppendUvarint(b, uint64(s.off))
		b = binary.AppendUvarint(b, s.id.ino)
		b = binary.AppendVarint(b, s.mtime)
		b = append(b, s.hash[:]...)
		if magic != indexMagicV1 {
			b, _ = s.hdr.AppendBinary(b)
		}
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// decodeIndex parses an index file written for dir, of version 2 or 1.
func decodeIndex(b []byte, dir string) (map[string]indexEntry, error) {
	v1 := len(b) >= len(indexMagicV1) && string(b[:len(indexMagicV1)]) == indexMagicV1
	magic, minEntry := indexMagic, minIndexEntry+jpeg.SummarySize
	if v1 {
		magic, minEntry = indexMagicV1, minIndexEntry
	}
	body, err := checksummed(b, magic, errIndex, "an index file")
	if err != nil {
		return nil, err
	}
	f := &fields{r: body, bad: errIndex}
	got, err := f.str(math.MaxUint64)
	if err != nil {
		return nil, err
	}
	if got != dir {
		return nil, fmt.Errorf("%w: written for %s", errIndex, DisplayName(got))
	}
	n, err := f.uv()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(f.r))/uint64(minEntry) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", errIndex, n, len(f.r))
	}
	m := make(map[string]indexEntry, n)
	for range n {
		rel, err := f.str(math.MaxUint64)
		if err != nil {
			return nil, err
		}
		var e indexEntry
		for _, p := range []*uint64{&e.size, &e.off, &e.ino} {
			if *p, err = f.uv(); err != nil {
				return nil, err
			}
		}
		mt, k := binary.Varint(f.r)
		if k <= 0 {
			return nil, fmt.Errorf("%w: truncated", errIndex)
		}
		f.r, e.mtime = f.r[k:], mt
		if e.hash, err = f.hash(); err != nil {
			return nil, err
		}
		if !v1 {
			if e.hdr, err = f.header(); err != nil {
				return nil, fmt.Errorf("%s: %w", DisplayName(rel), err)
			}
			e.hasHdr = true
		}
		if _, dup := m[rel]; dup {
			return nil, fmt.Errorf("%w: %s listed twice", errIndex, DisplayName(rel))
		}
		m[rel] = e
	}
	if len(f.r) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errIndex, len(f.r))
	}
	return m, nil
}

// indexPlace is where the index file lives: inside the data directory
// (through its root: a symlink there cannot redirect it) or at a path.
type indexPlace struct {
	inRoot bool
	path   string // the file, when not inRoot
	abs    string // the data directory's absolute path, written in the file
}

func (p indexPlace) String() string {
	if p.inRoot {
		return filepath.Join(p.abs, indexName)
	}
	return p.path
}

// place resolves OpenOptions.Index; ok is false for no index file.
func (ix *indexer) place() (p indexPlace, ok bool) {
	abs, err := filepath.Abs(ix.d.dir)
	if err != nil || ix.d.store != nil {
		abs = ix.d.dir // a store's name
	}
	p.abs = abs
	switch ix.opts.Index {
	case "-":
		return p, false
	case "":
	default:
		p.path = ix.opts.Index
		return p, true
	}
	if ix.d.store == nil && unix.Access(ix.d.dir, unix.W_OK) == nil {
		p.inRoot = true
		return p, true
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		ix.opts.Logger.Warn().Err(err).Msg("no writable place for the dataset index: every open hashes every sample")
		return p, false
	}
	sum := sha256.Sum256([]byte(abs))
	p.path = filepath.Join(cache, "sophon", hex.EncodeToString(sum[:])+".idx")
	return p, true
}

// loadIndex reads the index file; a missing one is empty, a bad one is
// ignored with a warning.
func (ix *indexer) loadIndex() map[string]indexEntry {
	p, ok := ix.place()
	if !ok {
		return nil
	}
	ix.d.stats.IndexFile = p.String()
	var f *os.File
	var err error
	if p.inRoot {
		f, _, err = openChecked(ix.d.root, indexName, nil)
	} else {
		f, err = os.OpenFile(p.path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			if fi, serr := f.Stat(); serr != nil || !fi.Mode().IsRegular() {
				f.Close()
				f, err = nil, fmt.Errorf("%s: %w", p.path, errNotRegular)
			}
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		defer f.Close()
		var b []byte
		if b, err = io.ReadAll(io.LimitReader(f, maxIndexBytes)); err == nil {
			var m map[string]indexEntry
			if m, err = decodeIndex(b, p.abs); err == nil {
				return m
			}
		}
	}
	ix.opts.Logger.Warn().Err(err).Str("index", p.String()).Msg("dataset index ignored: hashing every sample")
	return nil
}

// saveIndex writes the index file atomically: a temporary file beside it,
// then a rename.
func (ix *indexer) saveIndex() {
	p, ok := ix.place()
	if !ok {
		return
	}
	b := encodeIndex(p.abs, ix.d.samples)
	var err error
	if p.inRoot {
		err = writeAtomic(ix.d.root, indexName, b)
	} else {
		dir := filepath.Dir(p.path)
		if err = os.MkdirAll(dir, 0o755); err == nil {
			var root *os.Root
			if root, err = os.OpenRoot(dir); err == nil {
				err = writeAtomic(root, filepath.Base(p.path), b)
				root.Close()
			}
		}
	}
	if err != nil {
		ix.opts.Logger.Warn().Err(err).Str("index", p.String()).Msg("dataset index not written")
	}
}

// writeAtomic writes name beneath root by a temporary file and a rename, so
// a reader sees the old file or the new one, never a part.
func writeAtomic(root *os.Root, name string, b []byte) error {
	tmp := fmt.Sprintf("%s.tmp-%d-%s", name, os.Getpid(), rand.Text()[:8])
	return atomicfile.Write(root, tmp, name, b, func(tmp string) (atomicfile.File, error) {
		return root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	})
}

// checksummed checks a file of the given magic and a trailing SHA-256 over
// everything before it, and returns what lies between the two; its errors
// wrap bad and name what.
func checksummed(b []byte, magic string, bad error, what string) ([]byte, error) {
	if len(b) < len(magic)+sha256.Size || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not %s", bad, what)
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); string(got[:]) != string(sum) {
		return nil, fmt.Errorf("%w: checksum mismatch", bad)
	}
	return body[len(magic):], nil
}

// fields reads uvarints and length-prefixed strings off a checked body;
// its errors wrap bad.
type fields struct {
	r   []byte
	bad error
	v1  bool // a version 1 manifest: no headers
}

func (f *fields) uv() (uint64, error) {
	v, n := binary.Uvarint(f.r)
	if n <= 0 {
		return 0, fmt.Errorf("%w: truncated", f.bad)
	}
	f.r = f.r[n:]
	return v, nil
}

// str reads a string of at most max bytes.
func (f *fields) str(max uint64) (string, error) {
	n, err := f.uv()
	if err != nil {
		return "", err
	}
	if n > max {
		return "", fmt.Errorf("%w: a name of %d bytes, at most %d", f.bad, n, max)
	}
	if n > uint64(len(f.r)) {
		return "", fmt.Errorf("%w: truncated", f.bad)
	}
	s := string(f.r[:n])
	f.r = f.r[n:]
	return s, nil
}

// header reads a jpeg.Summary's binary form.
func (f *fields) header() (jpeg.Summary, error) {
	if len(f.r) < jpeg.SummarySize {
		return jpeg.Summary{}, fmt.Errorf("%w: truncated", f.bad)
	}
	h, err := jpeg.ParseSummary(f.r)
	if err != nil {
		return h, fmt.Errorf("%w: %w", f.bad, err)
	}
	f.r = f.r[jpeg.SummarySize:]
	return h, nil
}

// hash reads a 32-byte hash.
func (f *fields) hash() (h [32]byte, err error) {
	if len(f.r) < len(h) {
		return h, fmt.Errorf("%w: truncated", f.bad)
	}
	copy(h[:], f.r)
	f.r = f.r[len(h):]
	return h, nil
}
