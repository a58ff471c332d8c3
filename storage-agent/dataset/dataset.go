package dataset

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
)

// Errors returned by the dataset. The server maps them to per-sample error
// kinds.
var (
	// ErrNotFound: the sample id is not in the catalog.
	ErrNotFound = errors.New("dataset: sample not found")
	// ErrRead: reading a sample's bytes failed; the underlying I/O error is
	// wrapped beside it.
	ErrRead = errors.New("dataset: read failed")
	// ErrChanged: the file opened for a sample is not the one indexed (its
	// device, inode or size differ, it is no longer a regular file, or the
	// bytes read do not have the indexed SHA-256). It always comes wrapped
	// with ErrRead.
	ErrChanged = errors.New("dataset: file changed since indexing")
	// ErrLayout: the directory is neither an ImageFolder nor a set of
	// WebDataset shards the agent can serve, or (with OpenOptions.Strict)
	// it holds a bad entry.
	ErrLayout = errors.New("dataset: bad dataset layout")
	// ErrClosed: the dataset was closed.
	ErrClosed = errors.New("dataset: dataset closed")
	// ErrNotStored: a sample of the manifest whose file this agent does
	// not have (see OpenOptions.Manifest).
	ErrNotStored = errors.New("dataset: sample not stored on this agent")
	// ErrInterrupted: opening the dataset stopped because its context
	// ended (a signal during start-up).
	ErrInterrupted = errors.New("dataset: open dataset interrupted")
)

// MaxSampleBytes bounds one sample's raw size. A larger sample fails with
// ops.ErrTooLarge when read (it is data, not a reason to stop serving).
const MaxSampleBytes = 1 << 30

// sample is one catalog entry. shard is -1 for a loose file (ImageFolder),
// otherwise an index into Dataset.shards with off the member's data offset.
type sample struct {
	rel   string // slash-separated path relative to the dataset directory, raw bytes
	shard int
	off   int64
	size  int64
	label uint32
	id    fileID // the loose file's identity (zero for a shard member)
	mtime int64  // the file's (or shard's) modification time, for the index
	hash  [32]byte
	// hdr is the JPEG header's summary, unknown when it did not parse.
	hdr jpeg.Summary
	// absent: a manifest sample whose file this agent does not have.
	absent bool
	// etag is a loose sample's object's ETag, from a Store.
	etag string
	// verified is the loose file's ctime (ns) when a read last matched
	// hash, if that ctime was then at least racyWindow old; 0 when no read
	// did. Read and written atomically: reads of one sample run at once.
	verified int64
}

// shardFile is an open shard and what identified it when indexed.
type shardFile struct {
	name  string // relative to the dataset directory
	r     shardReader
	id    fileID // id.size is the shard's size
	mtime int64
}

// shardReader is an open shard: its *os.File, or the bytes of one where a
// test indexes shards in memory.
type shardReader interface {
	io.ReaderAt
	io.Closer
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
//     (any case); the label is the .cls member's decimal text when samples
//     have one (class names are then "0".."max"; a sample without one is
//     skipped), otherwise the member's parent folder name, with folder names
//     sorted into labels 0..C-1. Samples are ordered by shard, then by the
//     position of their image in the shard. Each shard is indexed once at
//     Open by walking its tar headers; reads use the remembered offsets.
//   - ImageFolder: otherwise, each subdirectory is a class (sorted by name,
//     labels 0..C-1) and the *.jpg / *.jpeg files below it (any depth, case
//     of the extension ignored, sorted by path) are its samples, ordered by
//     class and then path.
//
// Everything is opened through an [os.Root] on the directory: a symlink is
// followed only while it resolves inside the directory (a top-level class
// folder or a sample file may be one; folders below a class are walked only
// when real). Each sample's identity (device, inode, size) is remembered and
// checked on every read. Each sample's content hash (SHA-256 of its raw
// bytes) is computed at open, or reused from the index file (see
// [OpenOptions.Index]), and the fingerprint covers it. Every read (Read and
// ReadInto, a loose file or a shard member) hashes the bytes it read and
// compares: a file replaced, truncated or overwritten in place after
// indexing, even by other bytes of the same size under the same inode,
// fails with ErrChanged instead of serving other bytes.
//
// Names need not be UTF-8: reads use the raw bytes, while [Dataset.Path],
// [Dataset.ClassNames], [Skip] and error messages show [DisplayName]s.
//
// A Dataset is safe for concurrent use.
type Dataset struct {
	dir         string
	root        *os.Root
	samples     []sample
	classes     []string
	fp          string
	pathsDigest [32]byte
	skips       []Skip
	stats       IndexStats
	tars        bool  // WebDataset-style tar files
	store       Store // the object store, nil for a directory (root)
	// verifyAll hashes every read (OpenOptions.VerifyEveryRead).
	verifyAll bool

	mu     sync.RWMutex // guards root and shards against Close
	shards []shardFile
	closed bool
}

// DisplayName is name as shown in catalogs, logs and errors: itself when it
// is valid UTF-8 without control characters, else its Go-quoted form
// (strconv.Quote: "\xff" for a byte that is no UTF-8, "\n" for a newline),
// so a catalog can always be sent (protobuf strings must be UTF-8). Two
// names can share a display name ("a\n" quoted and a name spelled with the
// quotes); labels and ids stay distinct, only what is shown collides.
func DisplayName(name string) string {
	if utf8.ValidString(name) && !strings.ContainsFunc(name, unicode.IsControl) {
		return name
	}
	return strconv.Quote(name)
}

// Layout is the catalog's shard layout (see internal/placement): the tar
// files as they are when the dataset is WebDataset-style shards (named by
// their file's [DisplayName]; a tar file none of whose samples is served is
// no shard), else id ranges of shardSize samples, the last one shorter. It
// fails with placement.ErrTooManyShards past placement.MaxShards shards and
// placement.ErrShardSize when shardSize is 0 for a folder of images.
func (d *Dataset) Layout(shardSize uint64) (placement.Layout, error) {
	// Samples are ordered by shard, so each tar file's are contiguous.
	return layoutOf(len(d.samples), d.tars, func(i int) string { return d.samples[i].rel }, shardSize)
}

// MissingShards lists, ascending, the shards of l (the dataset's Layout)
// with a sample whose file this agent does not have (see
// [OpenOptions.Manifest]).
func (d *Dataset) MissingShards(l placement.Layout) []int {
	var out []int
	for s := range l.Len() {
		r := l.Shard(s)
		for i := r.First; i < r.First+r.Count && i < uint64(len(d.samples)); i++ {
			if d.samples[i].absent {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// Dir is the directory the dataset was opened from, or its store's name
// (s3://BUCKET/PREFIX).
func (d *Dataset) Dir() string { return d.dir }

// Len is the number of samples.
func (d *Dataset) Len() uint64 { return uint64(len(d.samples)) }

// Label is sample i's class; i must be below Len.
func (d *Dataset) Label(i uint64) uint32 { return d.samples[i].label }

// RawSize is sample i's size in bytes; i must be below Len.
func (d *Dataset) RawSize(i uint64) uint64 { return uint64(d.samples[i].size) }

// ContentHash is the SHA-256 of sample i's raw bytes as indexed; i must be
// below Len.
func (d *Dataset) ContentHash(i uint64) [32]byte { return d.samples[i].hash }

// Header is sample i's JPEG header summary, read at indexing from at most
// the first MaxHeaderPrefix bytes of its file (or taken from the index
// file or the manifest): unknown (not Known) when those bytes hold no
// header ReadHeader parses. It is an estimate for planning; reads do not
// depend on it. i must be below Len.
func (d *Dataset) Header(i uint64) jpeg.Summary { return d.samples[i].hdr }

// PathsDigest is the SHA-256 over every sample's relative path (raw
// bytes, then a NUL) in id order; the fingerprint covers it.
func (d *Dataset) PathsDigest() [32]byte { return d.pathsDigest }

// Path is sample i's location relative to the dataset directory (for a
// shard member, the shard's name, a slash and the member's name), as a
// [DisplayName]; i must be below Len.
func (d *Dataset) Path(i uint64) string { return DisplayName(d.samples[i].rel) }

// RawPath is sample i's location as the paths digest hashes it: Path
// before DisplayName; i must be below Len.
func (d *Dataset) RawPath(i uint64) string { return d.samples[i].rel }

// ClassNames are the class names, indexed by label, as [DisplayName]s.
func (d *Dataset) ClassNames() []string { return slices.Clone(d.classes) }

// Skipped lists the entries left out of the catalog, in the order found.
func (d *Dataset) Skipped() []Skip { return slices.Clone(d.skips) }

// Stats describes the indexing: samples, hashes computed and reused,
// skipped entries by reason, the index file and the time taken.
func (d *Dataset) Stats() IndexStats {
	st := d.stats
	st.Skipped = make(map[SkipReason]int, len(d.stats.Skipped))
	for k, v := range d.stats.Skipped {
		st.Skipped[k] = v
	}
	return st
}

// Fingerprint identifies the catalog and its content (see
// dataplanepb.Fingerprinter): paths, sizes, labels and content hashes, in
// id order. Two agents with the same fingerprint serve the same bytes under
// the same ids.
func (d *Dataset) Fingerprint() string { return d.fp }

// Read returns sample i's bytes, checked against the indexed SHA-256. An id
// out of range gives ErrNotFound; a failed read gives ErrRead wrapped with
// the cause (ErrChanged when the file is no longer the one indexed or its
// bytes are not the indexed ones); a sample above MaxSampleBytes gives
// ops.ErrTooLarge. Error messages start with "sample i (path)" and are
// valid UTF-8.
func (d *Dataset) Read(i uint64) ([]byte, error) {
	if i >= uint64(len(d.samples)) {
		return nil, fmt.Errorf("sample %d: %w (the catalog holds %d)", i, ErrNotFound, len(d.samples))
	}
	s := &d.samples[i]
	if s.absent {
		return nil, notStored(i, s)
	}
	if s.size > MaxSampleBytes {
		return nil, fmt.Errorf("sample %d (%s): %w: %d bytes, limit %d", i, DisplayName(s.rel), ops.ErrTooLarge, s.size, MaxSampleBytes)
	}
	buf := make([]byte, s.size)
	if err := d.read(s, buf); err != nil {
		return nil, readErr(i, s, err)
	}
	return buf, nil
}

// ReadInto reads sample i into buf, which must be exactly RawSize(i) long:
// the storage agent reads raw fetches straight into their wire form. It
// checks the bytes and fails as Read does; after an error buf's content
// is not the sample's.
func (d *Dataset) ReadInto(i uint64, buf []byte) error {
	if i >= uint64(len(d.samples)) {
		return fmt.Errorf("sample %d: %w (the catalog holds %d)", i, ErrNotFound, len(d.samples))
	}
	s := &d.samples[i]
	if s.absent {
		return notStored(i, s)
	}
	if int64(len(buf)) != s.size {
		return fmt.Errorf("sample %d (%s): buffer of %d bytes for a %d-byte sample", i, DisplayName(s.rel), len(buf), s.size)
	}
	if err := d.read(s, buf); err != nil {
		return readErr(i, s, err)
	}
	return nil
}

func notStored(i uint64, s *sample) error {
	return &utf8Error{fmt.Errorf("sample %d (%s): %w (its file is on other storage agents)", i, DisplayName(s.rel), ErrNotStored)}
}

func readErr(i uint64, s *sample, err error) error {
	return &utf8Error{fmt.Errorf("sample %d (%s): %w: %w", i, DisplayName(s.rel), ErrRead, err)}
}

// utf8Error makes an error's text valid UTF-8 (an os.PathError holds the
// raw name), keeping what it wraps for errors.Is.
type utf8Error struct{ err error }

func (e *utf8Error) Error() string { return strings.ToValidUTF8(e.err.Error(), "\uFFFD") }

func (e *utf8Error) Unwrap() error { return e.err }

// read fills buf with s's bytes and checks them against the index: a
// shard member's and an object's by their SHA-256 at every read, a loose
// file's by its SHA-256 unless its change time is that of a read whose
// hash matched, while that change time was already racyWindow old (or
// every time with VerifyEveryRead).
func (d *Dataset) read(s *sample, buf []byte) error {
	start := time.Now().UnixNano()
	ctime, err := d.readUnverified(s, buf)
	if err != nil {
		return err
	}
	if ctime != 0 && !d.verifyAll && atomic.LoadInt64(&s.verified) == ctime {
		return nil
	}
	if err := verify(s, buf); err != nil {
		return err
	}
	if ctime != 0 && start-ctime >= int64(racyWindow) {
		atomic.StoreInt64(&s.verified, ctime)
	}
	return nil
}

// racyWindow is how old a file's change time must be, when a read of it
// matched its hash, for later reads to trust it while it stays the same.
// A change after that read gives the file a later ctime, which user space
// cannot set back, unless the change fell within the same tick of the
// kernel's coarse file clock (a few ms): a ctime younger than this may
// have such a change still to come, and its file is hashed again (git's
// "racy" entries, the same problem).
var racyWindow = 2 * time.Second // tests shorten it

// readUnverified fills buf with s's bytes, checking the file's identity
// but not its content. For a loose file it returns the file's change time
// (ns), the same before and after the read, else 0 (the read is not
// trusted on it: the file changed while it was read, or is a shard member
// or an object).
func (d *Dataset) readUnverified(s *sample, buf []byte) (ctime int64, err error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return 0, ErrClosed
	}
	if s.shard >= 0 {
		return 0, readFull(d.shards[s.shard].r, buf, s.off)
	}
	if d.store != nil {
		return 0, readFull(&objectReader{st: d.store, o: s.object()}, buf, 0)
	}
	f, fi, err := openChecked(d.root, s.rel, &s.id)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := readFull(f, buf, 0); err != nil {
		return 0, err
	}
	after, err := f.Stat()
	if err != nil {
		return 0, nil
	}
	if c := ctimeOf(fi); c == ctimeOf(after) && idOf(after) == s.id {
		return c, nil
	}
	return 0, nil
}

// verify checks that buf, the bytes just read for s, are the bytes indexed:
// the (device, inode, size) check cannot see a file overwritten in place,
// or re-created with the same size under a reused inode number.
func verify(s *sample, buf []byte) error {
	if got := sha256.Sum256(buf); got != s.hash {
		return fmt.Errorf("%w: %s has SHA-256 %x, indexed %x", ErrChanged, DisplayName(s.rel), got[:8], s.hash[:8])
	}
	return nil
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

// Close releases the directory and the shard files; reads after it fail
// with ErrClosed. Close is safe to call twice.
func (d *Dataset) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for _, sf := range d.shards {
		errs = append(errs, sf.r.Close())
	}
	if d.root != nil {
		errs = append(errs, d.root.Close())
	}
	if d.store != nil {
		errs = append(errs, d.store.Close())
	}
	return errors.Join(errs...)
}
