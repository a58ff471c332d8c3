package dataset

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

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
	// HeadersRead counts the JPEG headers read from the files (a prefix of
	// each): every sample hashed, and those whose index entry had no
	// header (a version 1 index file).
	HeadersRead int
	// HeadersUnknown counts the catalog's samples whose JPEG header is
	// unknown (see [Dataset.Header]).
	HeadersUnknown int
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
	// Progress is how often listing a folder and hashing log their
	// progress to Logger (files/s, bytes/s and, for hashing, an ETA; see
	// progress.go) while they run. Zero means DefaultProgress (5 s);
	// negative never.
	Progress time.Duration
	// VerifyEveryRead hashes every read of a loose file against the
	// index. False (the default) hashes it at its first read and after
	// any change: a read is trusted without the hash while the file's
	// identity and change time are those of a read whose hash matched
	// (Dataset.read). Shard members and objects are hashed at every read
	// either way.
	VerifyEveryRead bool

	// noHeaders skips reading JPEG headers (every sample's is unknown): the
	// baseline of BenchmarkIndexHeaders.
	noHeaders bool
}

// maxSkipLogs bounds the warnings logged for skipped entries per open; the
// counts cover them all.
const maxSkipLogs = 100

// Open is OpenWith(dir, OpenOptions{}): lenient, silent, with the index
// file at its default place.
func Open(dir string) (*Dataset, error) { return OpenWith(dir, OpenOptions{}) }

// OpenWith indexes the dataset in dir. It fails when dir cannot be opened,
// holds no samples, or (Strict) holds a bad entry.
func OpenWith(dir string, opts OpenOptions) (*Dataset, error) {
	return OpenContext(context.Background(), dir, opts)
}

// OpenContext is [OpenWith] that stops when ctx ends: between class
// folders and shards while listing, and between samples while hashing
// (the index file is then left as it was). It fails with an error
// wrapping ErrInterrupted and ctx's error.
func OpenContext(ctx context.Context, dir string, opts OpenOptions) (*Dataset, error) {
	start := time.Now()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("dataset: open dataset: %w", err)
	}
	return index(ctx, start, &Dataset{dir: dir, root: root, verifyAll: opts.VerifyEveryRead}, opts)
}

// index indexes d, a folder's or a store's dataset opened at start; on
// failure it closes d.
func index(ctx context.Context, start time.Time, d *Dataset, opts OpenOptions) (*Dataset, error) {
	ix := &indexer{ctx: ctx, d: d, opts: opts}
	if err := ix.run(); err != nil {
		d.Close()
		return nil, err
	}
	d.stats.Took = time.Since(start)
	return d, nil
}

// indexer holds the state of one OpenWith.
type indexer struct {
	ctx  context.Context // ends the open (ErrInterrupted)
	d    *Dataset
	opts OpenOptions
}

// interrupted is the error of an open whose context ended, else nil.
func (ix *indexer) interrupted() error {
	if err := ix.ctx.Err(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInterrupted, DisplayName(ix.d.dir), context.Cause(ix.ctx))
	}
	return nil
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
	if err := ix.interrupted(); err != nil {
		return err
	}
	ix.hash()
	if err := ix.interrupted(); err != nil {
		return err
	}
	return ix.finish()
}

// scan lists the directory's samples: its tar files' members when it
// holds tar files, else an ImageFolder's images.
func (ix *indexer) scan() error {
	d := ix.d
	if d.store != nil {
		return ix.scanStore()
	}
	ents, err := readDir(d.root, ".")
	if err != nil {
		return fmt.Errorf("dataset: open dataset: %w", err)
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

// hash fills the samples' content hashes and header summaries, from the
// index file where it has them, and rewrites the index file when it lacked
// some.
func (ix *indexer) hash() {
	d := ix.d
	idx := ix.loadIndex()
	ix.hashAll(idx)
	if ix.ctx.Err() != nil {
		return // the samples not hashed are no bad entries; keep the index file
	}
	if len(d.samples) > 0 && !ix.opts.noHeaders && (d.stats.HeadersRead > 0 || len(idx) != len(d.samples)) {
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
	for i := range d.samples {
		if !d.samples[i].hdr.Known() {
			d.stats.HeadersUnknown++
		}
	}
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
				if ms.Header.Known() { // the same bytes: the same header, unless from a version 1 manifest
					s.hdr = ms.Header
				}
				out[i] = s
				continue
			}
			ix.skip(ms.Rel, SkipManifestMismatch, fmt.Sprintf("%d bytes here, %d in the manifest, or other content", d.samples[j].size, ms.Size))
		}
		out[i] = sample{rel: ms.Rel, shard: -1, size: int64(ms.Size), label: ms.Label, hash: ms.Hash, hdr: ms.Header, absent: true}
		d.stats.Missing++
	}
	for rel := range local {
		ix.skip(rel, SkipNotInManifest, "the manifest does not list it")
	}
	d.samples, d.classes, d.tars = out, slices.Clone(m.Classes), m.Tars
}

// hashAll fills every sample's content hash and header summary, reusing
// the index's when the sample's (path, size, offset, inode, mtime) are
// unchanged (and reading only the header of a sample whose entry has
// none), and drops the samples that cannot be read.
func (ix *indexer) hashAll(idx map[string]indexEntry) {
	d := ix.d
	var todo, hdrTodo []int
	for i := range d.samples {
		s := &d.samples[i]
		if e, ok := idx[s.rel]; ok && e.size == uint64(s.size) && e.off == uint64(s.off) && e.ino == s.id.ino && e.mtime == s.mtime {
			s.hash = e.hash
			d.stats.Reused++
			if e.hasHdr {
				s.hdr = e.hdr
			} else if !ix.opts.noHeaders {
				hdrTodo = append(hdrTodo, i)
			}
			continue
		}
		todo = append(todo, i)
	}
	errs := ix.readAll(todo, hdrTodo)
	d.stats.Hashed = len(todo)
	if !ix.opts.noHeaders {
		d.stats.HeadersRead = len(todo) + len(hdrTodo)
	}
	kept := d.samples[:0]
	for i, s := range d.samples {
		if errs[i] != nil {
			ix.skipErr(s.rel, errs[i])
			d.stats.Hashed--
			if !ix.opts.noHeaders {
				d.stats.HeadersRead--
			}
			continue
		}
		kept = append(kept, s)
	}
	d.samples = kept
}

// readAll hashes (and reads the header of) the samples of todo and reads
// the header of those of hdrTodo, in parallel; the error of sample i is
// at i.
func (ix *indexer) readAll(todo, hdrTodo []int) []error {
	d := ix.d
	errs := make([]error, len(d.samples))
	workers := ix.opts.Workers
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	// Each worker's copy buffer: 256 KiB, or the largest sample's size
	// when smaller (a dataset of small samples allocates no more); it
	// holds a header prefix too.
	bufSize := int64(1)
	for _, i := range todo {
		bufSize = max(bufSize, min(d.samples[i].size, 256<<10))
	}
	for _, i := range hdrTodo {
		bufSize = max(bufSize, min(d.samples[i].size, MaxHeaderPrefix))
	}
	type job struct {
		i    int
		hash bool
	}
	var total int64
	for _, i := range todo {
		total += d.samples[i].size
	}
	for _, i := range hdrTodo {
		total += min(d.samples[i].size, MaxHeaderPrefix)
	}
	prog := startProgress(ix.opts.Logger, "hashing", ix.opts.Progress, int64(len(todo)+len(hdrTodo)), total)
	defer prog.end()
	next := make(chan job)
	var wg sync.WaitGroup
	for range min(workers, len(todo)+len(hdrTodo)) {
		wg.Go(func() {
			buf := make([]byte, bufSize)
			for j := range next {
				s := &d.samples[j.i]
				if j.hash {
					errs[j.i] = d.hashSample(s, buf, !ix.opts.noHeaders)
					prog.add(s.size)
				} else {
					s.hdr = d.headerSample(s, buf)
					prog.add(min(s.size, MaxHeaderPrefix))
				}
			}
		})
	}
	send := func(j job) bool {
		select {
		case next <- j:
			return true
		case <-ix.ctx.Done():
			return false
		}
	}
	for _, i := range todo {
		if !send(job{i, true}) {
			break
		}
	}
	for _, i := range hdrTodo {
		if !send(job{i, false}) {
			break
		}
	}
	close(next)
	wg.Wait()
	return errs
}

// hashSample computes s.hash from the file (checking it is the one indexed)
// or the shard member and, with header, s.hdr from its first bytes.
func (d *Dataset) hashSample(s *sample, buf []byte, header bool) error {
	h := sha256.New()
	var r io.Reader
	switch {
	case s.shard < 0 && d.store != nil:
		rc, err := d.store.Open(s.object())
		if err != nil {
			return err
		}
		defer rc.Close()
		r = rc
	case s.shard < 0:
		f, _, err := openChecked(d.root, s.rel, &s.id)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	default:
		r = io.NewSectionReader(d.shards[s.shard].r, s.off, s.size)
	}
	r = io.LimitReader(r, s.size)
	var n int64
	if header {
		p := buf[:min(int64(len(buf)), s.size, MaxHeaderPrefix)]
		k, err := io.ReadFull(r, p)
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: read %d of %d bytes", ErrChanged, k, s.size)
		} else if err != nil {
			return err
		}
		h.Write(p)
		s.hdr, n = summarize(p), int64(k)
	}
	m, err := io.CopyBuffer(h, r, buf)
	if err != nil {
		return err
	}
	if n += m; n != s.size {
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
