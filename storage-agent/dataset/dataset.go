package dataset

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Errors returned by the dataset. The server maps them to per-sample error
// kinds.
var (
	// ErrNotFound: the sample id is not in the catalog.
	ErrNotFound = errors.New("storageagent: sample not found")
	// ErrRead: reading a sample's bytes failed; the underlying I/O error is
	// wrapped beside it.
	ErrRead = errors.New("storageagent: read failed")
	// ErrChanged: the file opened for a sample is not the one indexed (its
	// device, inode or size differ, or it is no longer a regular file). It
	// always comes wrapped with ErrRead.
	ErrChanged = errors.New("storageagent: file changed since indexing")
	// ErrLayout: the directory is neither an ImageFolder nor a set of
	// WebDataset shards the agent can serve, or (with OpenOptions.Strict)
	// it holds a bad entry.
	ErrLayout = errors.New("storageagent: bad dataset layout")
	// ErrClosed: the dataset was closed.
	ErrClosed = errors.New("storageagent: dataset closed")
	// ErrNotStored: a sample of the manifest whose file this agent does
	// not have (see OpenOptions.Manifest).
	ErrNotStored = errors.New("storageagent: sample not stored on this agent")
)

// MaxSampleBytes bounds one sample's raw size. A larger sample fails with
// ops.ErrTooLarge when read (it is data, not a reason to stop serving).
const MaxSampleBytes = 1 << 30

// SkipReason says why an entry of the data directory is not served.
type SkipReason string

// The reasons an entry is skipped while indexing.
const (
	SkipDangling   SkipReason = "dangling-symlink" // a symlink to nothing
	SkipLoop       SkipReason = "symlink-loop"     // too many levels of symlinks
	SkipEscape     SkipReason = "escapes-root"     // resolves outside the data directory
	SkipUnreadable SkipReason = "unreadable"       // open, stat or read failed
	SkipNotRegular SkipReason = "not-regular"      // a fifo, socket, device or directory named like a sample
	SkipChanged    SkipReason = "changed"          // replaced while being indexed
	SkipBadShard   SkipReason = "bad-shard"        // not a tar file (nothing served from it)
	SkipCutShard   SkipReason = "cut-shard"        // a damaged or cut tail (the members before it are served)
	SkipDuplicate  SkipReason = "duplicate-key"    // a second image for one key in a shard
	SkipBadLabel   SkipReason = "bad-label"        // a .cls that is no class number, or none where others have one
	// With a manifest (OpenOptions.Manifest):
	SkipNotInManifest    SkipReason = "not-in-manifest"   // a sample the manifest does not list
	SkipManifestMismatch SkipReason = "manifest-mismatch" // listed, with another size or content hash
)

// Skip is one entry left out of the catalog.
type Skip struct {
	// Path is the entry relative to the data directory, display-safe (see
	// [DisplayName]).
	Path   string
	Reason SkipReason
	// Detail is the cause, display-safe.
	Detail string
}

func (s Skip) String() string { return fmt.Sprintf("%s: %s: %s", s.Path, s.Reason, s.Detail) }

// IndexStats describes what OpenWith did.
type IndexStats struct {
	// Samples is the number of samples in the catalog.
	Samples int
	// Missing counts the catalog's samples whose files this agent does
	// not have (with a manifest).
	Missing int
	// Hashed and Reused count the content hashes computed and those taken
	// from the index file.
	Hashed, Reused int
	// Skipped counts the skipped entries by reason.
	Skipped map[SkipReason]int
	// IndexFile is the index file used, empty when none.
	IndexFile string
	// Took is the time indexing took.
	Took time.Duration
}

// OpenOptions configure [OpenWith]. The zero value is lenient, logs nothing
// and keeps the index file at its default place.
type OpenOptions struct {
	// Strict refuses the dataset (ErrLayout) on any bad entry: a dangling
	// symlink, a symlink loop, a symlink leaving the directory, an
	// unreadable or non-regular sample file, a damaged shard, a duplicate
	// key or a bad label. False skips such entries, logs and counts them
	// (see [Dataset.Skipped]) and serves the rest.
	Strict bool
	// Logger receives one warning per skipped entry (the first
	// maxSkipLogs of them) and the index file's problems. The zero value
	// writes nothing.
	Logger zerolog.Logger
	// Index is the content-hash index file. Empty means <dir>/.sophon-index
	// when dir is writable, else <user cache dir>/sophon/<sha256 of the
	// absolute dir>.idx. "-" means none: every sample is hashed at every
	// open and nothing is written.
	Index string
	// Workers hash samples in parallel. Zero means runtime.NumCPU().
	Workers int
	// Manifest, when set, is the whole dataset's catalog (see [Manifest]):
	// the dataset has its samples, ids, labels, classes and fingerprint,
	// whichever of their files dir holds. A file of dir that is in the
	// manifest with the same size and content hash is served; one that
	// differs (SkipManifestMismatch) or is not in it (SkipNotInManifest) is
	// skipped; a manifest sample without its file is missing: listed and
	// counted, never served (ErrNotStored).
	Manifest *Manifest
}

// maxSkipLogs bounds the warnings logged for skipped entries per open; the
// counts cover them all.
const maxSkipLogs = 100

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
	// absent: a manifest sample whose file this agent does not have.
	absent bool
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
// checked on every read, so a file replaced after indexing fails with
// ErrChanged instead of serving other bytes. Each sample's content hash
// (SHA-256 of its raw bytes) is computed at open, or reused from the index
// file (see [OpenOptions.Index]), and the fingerprint covers it.
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
	tars        bool // WebDataset-style tar files

	mu     sync.RWMutex // guards root and shards against Close
	shards []shardFile
	closed bool
}

// Open is OpenWith(dir, OpenOptions{}): lenient, silent, with the index
// file at its default place.
func Open(dir string) (*Dataset, error) { return OpenWith(dir, OpenOptions{}) }

// OpenWith indexes the dataset in dir. It fails when dir cannot be opened,
// holds no samples, or (Strict) holds a bad entry.
func OpenWith(dir string, opts OpenOptions) (*Dataset, error) {
	start := time.Now()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("storageagent: open dataset: %w", err)
	}
	d := &Dataset{dir: dir, root: root}
	ix := &indexer{d: d, opts: opts}
	if err := ix.run(); err != nil {
		d.Close()
		return nil, err
	}
	d.stats.Took = time.Since(start)
	return d, nil
}

// indexer holds the state of one OpenWith.
type indexer struct {
	d    *Dataset
	opts OpenOptions
}

func (ix *indexer) skip(rel string, reason SkipReason, detail string) {
	s := Skip{Path: DisplayName(rel), Reason: reason, Detail: strings.ToValidUTF8(detail, "\uFFFD")}
	ix.d.skips = append(ix.d.skips, s)
	if len(ix.d.skips) <= maxSkipLogs {
		ix.opts.Logger.Warn().Str("path", s.Path).Str("reason", string(reason)).Str("detail", s.Detail).Msg("dataset entry skipped")
	}
}

// skipErr records an entry that failed to open or stat.
func (ix *indexer) skipErr(rel string, err error) {
	ix.skip(rel, classify(err), err.Error())
}

// classify names why opening or stating an entry through the root failed.
func classify(err error) SkipReason {
	switch {
	case errors.Is(err, syscall.ELOOP):
		return SkipLoop
	// NB: os.Root's escape error is unexported; its text is stable.
	case strings.Contains(err.Error(), "path escapes from parent"):
		return SkipEscape
	case errors.Is(err, fs.ErrNotExist):
		return SkipDangling
	case errors.Is(err, ErrChanged):
		return SkipChanged
	case errors.Is(err, errNotRegular):
		return SkipNotRegular
	}
	return SkipUnreadable
}

// run indexes the directory: it finds the samples, hashes them and
// checks what it found.
func (ix *indexer) run() error {
	if err := ix.scan(); err != nil {
		return err
	}
	ix.hash()
	return ix.finish()
}

// scan lists the directory's samples: its tar files' members when it
// holds tar files, else an ImageFolder's images.
func (ix *indexer) scan() error {
	d := ix.d
	ents, err := readDir(d.root, ".")
	if err != nil {
		return fmt.Errorf("storageagent: open dataset: %w", err)
	}
	var tars []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(strings.ToLower(e.Name()), ".tar") {
			tars = append(tars, e.Name())
		}
	}
	d.tars = len(tars) > 0
	if d.tars {
		ix.indexShards(tars)
	} else {
		ix.indexFolders(ents)
	}
	return nil
}

// hash fills the samples' content hashes, from the index file where it
// has them, and rewrites the index file when it lacked some.
func (ix *indexer) hash() {
	d := ix.d
	idx := ix.loadIndex()
	ix.hashAll(idx)
	if len(d.samples) > 0 && (d.stats.Hashed > 0 || len(idx) != len(d.samples)) {
		ix.saveIndex()
	}
}

// finish applies the manifest, counts what was skipped, refuses the
// dataset when it must (strict with a bad entry, or no samples) and
// fingerprints it.
func (ix *indexer) finish() error {
	d := ix.d
	if ix.opts.Manifest != nil {
		ix.applyManifest(ix.opts.Manifest)
	}
	d.stats.Samples = len(d.samples)
	d.stats.Skipped = map[SkipReason]int{}
	for _, s := range d.skips {
		d.stats.Skipped[s.Reason]++
	}
	if ix.opts.Strict && len(d.skips) > 0 {
		return fmt.Errorf("%w: %d bad entries, first %s", ErrLayout, len(d.skips), d.skips[0])
	}
	if len(d.samples) == d.stats.Missing {
		if ix.opts.Manifest != nil {
			return fmt.Errorf("%w: none of the manifest's %d samples is in %s", ErrLayout, len(d.samples), DisplayName(d.dir))
		}
		return fmt.Errorf("%w: no samples in %s", ErrLayout, DisplayName(d.dir))
	}
	d.fingerprint()
	return nil
}

// applyManifest makes the manifest's samples the catalog: each takes the
// file dir has for it when that file's size and hash match, else is
// absent. Files the manifest does not list are skipped.
func (ix *indexer) applyManifest(m *Manifest) {
	d := ix.d
	local := make(map[string]int, len(d.samples))
	for i, s := range d.samples {
		local[s.rel] = i
	}
	out := make([]sample, len(m.Samples))
	for i, ms := range m.Samples {
		j, ok := local[ms.Rel]
		if ok {
			delete(local, ms.Rel)
			if s := d.samples[j]; uint64(s.size) == ms.Size && s.hash == ms.Hash {
				s.label = ms.Label
				out[i] = s
				continue
			}
			ix.skip(ms.Rel, SkipManifestMismatch, fmt.Sprintf("%d bytes here, %d in the manifest, or other content", d.samples[j].size, ms.Size))
		}
		out[i] = sample{rel: ms.Rel, shard: -1, size: int64(ms.Size), label: ms.Label, hash: ms.Hash, absent: true}
		d.stats.Missing++
	}
	for rel := range local {
		ix.skip(rel, SkipNotInManifest, "the manifest does not list it")
	}
	d.samples, d.classes, d.tars = out, slices.Clone(m.Classes), m.Tars
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

func isJPEGName(name string) bool {
	ext := strings.ToLower(path.Ext(name))
	return ext == ".jpg" || ext == ".jpeg"
}

func (ix *indexer) indexFolders(ents []fs.DirEntry) {
	d := ix.d
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.Name(), indexName):
			// The index file and its temporaries are no class.
		case e.IsDir():
			d.classes = append(d.classes, e.Name())
		case e.Type()&fs.ModeSymlink != 0:
			// A class folder may be a symlink, if it stays inside.
			fi, err := d.root.Stat(e.Name())
			if err != nil {
				ix.skipErr(e.Name(), err)
			} else if fi.IsDir() {
				d.classes = append(d.classes, e.Name())
			}
		}
	}
	for label, class := range d.classes {
		var files []sample
		ix.walk(class, uint32(label), &files)
		slices.SortFunc(files, func(a, b sample) int { return strings.Compare(a.rel, b.rel) })
		d.samples = append(d.samples, files...)
		d.classes[label] = DisplayName(class)
	}
}

// walk adds the JPEGs below dir. It descends into real folders only, so a
// symlink cannot make it loop.
func (ix *indexer) walk(dir string, label uint32, files *[]sample) {
	ents, err := readDir(ix.d.root, dir)
	if err != nil {
		ix.skipErr(dir, err)
		return
	}
	for _, e := range ents {
		rel := dir + "/" + e.Name()
		switch {
		case e.IsDir():
			ix.walk(rel, label, files)
		case !isJPEGName(e.Name()):
		default:
			fi, err := ix.d.root.Stat(rel) // follows a symlink that stays inside
			if err != nil {
				ix.skipErr(rel, err)
				continue
			}
			if !fi.Mode().IsRegular() {
				ix.skip(rel, SkipNotRegular, modeName(fi.Mode()))
				continue
			}
			*files = append(*files, sample{rel: rel, shard: -1, size: fi.Size(), label: label, id: idOf(fi), mtime: mtimeOf(fi)})
		}
	}
}

// member is a sample found in a shard while indexing it.
type member struct {
	key       string
	image     string // member name of the image
	off, size int64
	hasImage  bool
	cls       string // the .cls text, if any
	hasCls    bool
	badCls    bool // the .cls is too long
}

// memberSkip is a member indexShard left out.
type memberSkip struct {
	name   string
	reason SkipReason
	detail string
}

// indexShards opens the tar files names and catalogs their samples.
func (ix *indexer) indexShards(names []string) {
	var shards []shardFile
	for _, name := range names {
		f, fi, err := openChecked(ix.d.root, name, nil)
		if err != nil {
			ix.skipErr(name, err)
			continue
		}
		shards = append(shards, shardFile{name: name, r: f, id: idOf(fi), mtime: mtimeOf(fi)})
	}
	ix.catalogShards(shards)
}

// found is a sample found in shard d.shards[shard] while indexing.
type found struct {
	shard int
	m     *member
}

// catalogShards walks each open shard's tar headers, keeps the shards with
// samples (closing the others) and labels the samples.
func (ix *indexer) catalogShards(shards []shardFile) {
	d := ix.d
	var all []found
	for _, sf := range shards {
		members, skips, err := indexShard(sf.r, sf.id.size)
		for _, s := range skips {
			ix.skip(sf.name+"/"+s.name, s.reason, s.detail)
		}
		if err != nil {
			if len(members) == 0 {
				ix.skip(sf.name, SkipBadShard, err.Error())
				sf.r.Close()
				continue
			}
			ix.skip(sf.name, SkipCutShard, fmt.Sprintf("%v (the %d samples before it are served)", err, len(members)))
		}
		si := len(d.shards)
		d.shards = append(d.shards, sf)
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
	if withCls > 0 {
		ix.labelByCls(all, withCls)
	} else {
		ix.labelByFolder(all)
	}
}

// labelByCls labels the samples by their .cls members (withCls of them
// have one) and names the classes "0".."max"; a sample without a class
// number is skipped.
func (ix *indexer) labelByCls(all []found, withCls int) {
	d := ix.d
	maxLabel := -1
	for _, x := range all {
		rel := d.shardName(x.shard) + "/" + x.m.image
		if !x.m.hasCls {
			ix.skip(rel, SkipBadLabel, fmt.Sprintf("no .cls member while %d samples have one", withCls))
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(x.m.cls), 10, 31)
		if err != nil || x.m.badCls {
			ix.skip(rel, SkipBadLabel, fmt.Sprintf(".cls %q is not a class number", x.m.cls))
			continue
		}
		maxLabel = max(maxLabel, int(v))
		d.samples = append(d.samples, d.shardSample(x.shard, x.m, uint32(v)))
	}
	for i := 0; i <= maxLabel; i++ {
		d.classes = append(d.classes, strconv.Itoa(i))
	}
}

// labelByFolder labels the samples by their parent folder's name, the
// names sorted into labels 0..C-1.
func (ix *indexer) labelByFolder(all []found) {
	d := ix.d
	set := map[string]bool{}
	for _, x := range all {
		set[path.Base(path.Dir(x.m.key))] = true
	}
	var raw []string
	for c := range set {
		raw = append(raw, c)
	}
	slices.Sort(raw)
	labels := make(map[string]uint32, len(raw))
	for i, c := range raw {
		labels[c] = uint32(i)
		d.classes = append(d.classes, DisplayName(c))
	}
	for _, x := range all {
		d.samples = append(d.samples, d.shardSample(x.shard, x.m, labels[path.Base(path.Dir(x.m.key))]))
	}
}

// shardName is shard si's file name.
func (d *Dataset) shardName(si int) string { return d.shards[si].name }

func (d *Dataset) shardSample(si int, m *member, label uint32) sample {
	sf := d.shards[si]
	return sample{rel: d.shardName(si) + "/" + m.image, shard: si, off: m.off, size: m.size, label: label,
		id: fileID{dev: sf.id.dev, ino: sf.id.ino}, mtime: sf.mtime}
}

// maxClsBytes bounds a .cls member read while indexing.
const maxClsBytes = 64

// indexShard walks the tar headers of the size-byte shard r once and
// returns its samples in the order of their images, the members it left
// out, and the error that stopped it early, if any: the members before a
// damaged or cut part are returned. NB: tar.Reader reads a header without
// reading ahead, so right after Next the section's offset is the member's
// first data byte; it skips unread data with Seek, so indexing does not
// read images.
func indexShard(r io.ReaderAt, size int64) (order []*member, skips []memberSkip, err error) {
	f := io.NewSectionReader(r, 0, size)
	tr := tar.NewReader(f)
	byKey := map[string]*member{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return order, skips, nil
		}
		if err != nil {
			return order, skips, err
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
			off, err := f.Seek(0, io.SeekCurrent)
			if err != nil {
				return order, skips, err
			}
			if h.Size > size-off {
				// NB: the reader seeks over data, so a cut shard shows
				// only here.
				return order, skips, fmt.Errorf("member %s: %d bytes at offset %d overrun the %d-byte shard", DisplayName(name), h.Size, off, size)
			}
			if m.hasImage {
				skips = append(skips, memberSkip{name, SkipDuplicate, fmt.Sprintf("sample %s has an image already (%s)", DisplayName(key), DisplayName(m.image))})
				continue
			}
			m.image, m.off, m.size, m.hasImage = name, off, h.Size, true
			order = append(order, m)
		case ext == ".cls":
			b, err := io.ReadAll(io.LimitReader(tr, maxClsBytes+1))
			if err != nil {
				return order, skips, err
			}
			if len(b) > maxClsBytes {
				b, m.badCls = b[:maxClsBytes], true
			}
			m.cls, m.hasCls = string(b), true
		}
	}
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

// hashAll fills every sample's content hash, reusing the index's when the
// sample's (path, size, offset, inode, mtime) are unchanged, and drops the
// samples that cannot be read.
func (ix *indexer) hashAll(idx map[string]indexEntry) {
	d := ix.d
	var todo []int
	for i := range d.samples {
		s := &d.samples[i]
		if e, ok := idx[s.rel]; ok && e.size == uint64(s.size) && e.off == uint64(s.off) && e.ino == s.id.ino && e.mtime == s.mtime {
			s.hash = e.hash
			d.stats.Reused++
			continue
		}
		todo = append(todo, i)
	}
	errs := make([]error, len(d.samples))
	workers := ix.opts.Workers
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	// Each worker's copy buffer: 256 KiB, or the largest sample's size
	// when smaller (a dataset of small samples allocates no more).
	bufSize := int64(1)
	for _, i := range todo {
		bufSize = max(bufSize, min(d.samples[i].size, 256<<10))
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(todo)) {
		wg.Go(func() {
			buf := make([]byte, bufSize)
			for i := range next {
				errs[i] = d.hashSample(&d.samples[i], buf)
			}
		})
	}
	for _, i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	d.stats.Hashed = len(todo)
	kept := d.samples[:0]
	for i, s := range d.samples {
		if errs[i] != nil {
			ix.skipErr(s.rel, errs[i])
			d.stats.Hashed--
			continue
		}
		kept = append(kept, s)
	}
	d.samples = kept
}

// hashSample computes s.hash from the file (checking it is the one indexed)
// or the shard member.
func (d *Dataset) hashSample(s *sample, buf []byte) error {
	h := sha256.New()
	var r io.Reader
	if s.shard < 0 {
		f, _, err := openChecked(d.root, s.rel, &s.id)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	} else {
		r = io.NewSectionReader(d.shards[s.shard].r, s.off, s.size)
	}
	n, err := io.CopyBuffer(h, io.LimitReader(r, s.size), buf)
	if err != nil {
		return err
	}
	if n != s.size {
		return fmt.Errorf("%w: read %d of %d bytes", ErrChanged, n, s.size)
	}
	h.Sum(s.hash[:0])
	return nil
}

// fingerprint sets d.pathsDigest and d.fp (see dataplanepb.Fingerprinter).
func (d *Dataset) fingerprint() {
	ph := sha256.New()
	for _, s := range d.samples {
		ph.Write([]byte(s.rel))
		ph.Write([]byte{0})
	}
	ph.Sum(d.pathsDigest[:0])
	fp := dataplanepb.NewFingerprinter(d.pathsDigest[:])
	for _, s := range d.samples {
		fp.Add(uint64(s.size), s.label, s.hash)
	}
	d.fp = fp.Sum()
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

// Dir is the directory the dataset was opened from.
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

// PathsDigest is the SHA-256 over every sample's relative path (raw
// bytes, then a NUL) in id order; the fingerprint covers it.
func (d *Dataset) PathsDigest() [32]byte { return d.pathsDigest }

// Path is sample i's location relative to the dataset directory (for a
// shard member, the shard's name, a slash and the member's name), as a
// [DisplayName]; i must be below Len.
func (d *Dataset) Path(i uint64) string { return DisplayName(d.samples[i].rel) }

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

// Read returns sample i's bytes. An id out of range gives ErrNotFound; a
// failed read gives ErrRead wrapped with the cause (ErrChanged when the file
// is no longer the one indexed); a sample above MaxSampleBytes gives
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
// the storage agent reads raw fetches straight into their wire form.
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

func (d *Dataset) read(s *sample, buf []byte) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	if s.shard >= 0 {
		return readFull(d.shards[s.shard].r, buf, s.off)
	}
	f, _, err := openChecked(d.root, s.rel, &s.id)
	if err != nil {
		return err
	}
	defer f.Close()
	return readFull(f, buf, 0)
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
	return errors.Join(errs...)
}
