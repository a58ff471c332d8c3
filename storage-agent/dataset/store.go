package dataset

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Store is an object store a dataset is read from instead of a directory:
// a bucket and prefix of an S3-compatible server (package s3src). Keys are
// relative to the prefix and slash-separated, so an object store holds the
// two layouts a directory does: *.tar objects at the top (shards), or
// CLASS/.../NAME.jpg keys (an ImageFolder). A Store is safe for concurrent
// use.
type Store interface {
	// Name is the dataset's location as shown and as the index file
	// records it, for example "s3://bucket/prefix".
	Name() string
	// List returns the objects below the prefix, sorted by key; it fails
	// when there are more than the store's bound on objects.
	List(ctx context.Context) ([]Object, error)
	// Open streams object o whole (one request), failing as ReadAt does.
	Open(o Object) (io.ReadCloser, error)
	// ReadAt fills p from object o at offset off (a ranged read). It
	// fails with an error wrapping ErrChanged when the object is no
	// longer o (another ETag), and with fs.ErrNotExist when it is gone.
	ReadAt(o Object, p []byte, off int64) (int, error)
	// Close ends the reads in flight; reads after it fail.
	Close() error
}

// Object is an object of a [Store]: its key relative to the store's
// prefix, its size, its entity tag and its modification time (Unix
// nanoseconds).
type Object struct {
	Key     string
	Size    int64
	ETag    string
	ModTime int64
}

// OpenStore indexes the dataset in st as [OpenWith] does a directory: the
// same layouts, content hashes, index file (keyed by the store's name, and
// each sample's key, size, ETag and modification time; the default file
// is in the user cache directory), manifest and checks. Every read is a
// ranged read of the object checked against the ETag indexed and the
// content hash: a changed object fails with ErrChanged. The dataset owns
// st and closes it. The open stops when ctx ends, as [OpenContext]'s does;
// the listing takes ctx.
func OpenStore(ctx context.Context, st Store, opts OpenOptions) (*Dataset, error) {
	return index(ctx, time.Now(), &Dataset{dir: st.Name(), store: st}, opts)
}

// Remote says whether the dataset is read from an object store (each read
// a network round trip) rather than a directory.
func (d *Dataset) Remote() bool { return d.store != nil }

// etagID is the 64-bit identity of an ETag that a sample's fileID keeps
// (in its inode) and the index file records.
func etagID(etag string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(strings.Trim(etag, `"`)))
	return h.Sum64()
}

// objectID is o's identity as a sample's fileID: dev 0, the ETag's id as
// the inode, and the size.
func objectID(o Object) fileID { return fileID{ino: etagID(o.ETag), size: o.Size} }

// scanStore lists the store's samples: its top-level *.tar objects'
// members when it has any, else the JPEG keys below CLASS/ prefixes.
func (ix *indexer) scanStore() error {
	d := ix.d
	objs, err := d.store.List(ix.ctx)
	if err != nil {
		return fmt.Errorf("dataset: open dataset %s: %w", DisplayName(d.dir), err)
	}
	var tars []Object
	for _, o := range objs {
		if !strings.Contains(o.Key, "/") && strings.HasSuffix(strings.ToLower(o.Key), ".tar") {
			tars = append(tars, o)
		}
	}
	d.tars = len(tars) > 0
	if d.tars {
		shards := make([]shardFile, 0, len(tars))
		for _, o := range tars {
			shards = append(shards, shardFile{name: o.Key, r: &objectReader{st: d.store, o: o}, id: objectID(o), mtime: o.ModTime})
		}
		ix.catalogShardsWindowed(shards)
		return nil
	}
	ix.indexKeys(objs)
	return nil
}

// indexKeys catalogs an ImageFolder of keys: the first component of a key
// is its class (classes sorted by name, labels 0..C-1), the JPEG keys
// below it its samples, sorted by key. Keys at the top are no samples.
func (ix *indexer) indexKeys(objs []Object) {
	d := ix.d
	byClass := map[string][]Object{}
	for _, o := range objs {
		class, rest, ok := strings.Cut(o.Key, "/")
		if !ok || class == "" || rest == "" || !isJPEGName(o.Key) || strings.HasPrefix(class, indexName) {
			continue
		}
		byClass[class] = append(byClass[class], o)
	}
	for _, class := range slices.Sorted(maps.Keys(byClass)) {
		label := uint32(len(d.classes))
		d.classes = append(d.classes, DisplayName(class))
		keys := byClass[class]
		slices.SortFunc(keys, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
		for _, o := range keys {
			d.samples = append(d.samples, sample{rel: o.Key, shard: -1, size: o.Size, label: label, id: objectID(o), mtime: o.ModTime, etag: o.ETag})
		}
	}
}

// catalogShardsWindowed is catalogShards over shards read through a
// bounded read-ahead window while their tar headers are walked: a header
// is 512 bytes, and one ranged read per header would cost a round trip
// each.
func (ix *indexer) catalogShardsWindowed(shards []shardFile) {
	orig := make([]shardReader, len(shards))
	for i := range shards {
		orig[i] = shards[i].r
		shards[i].r = &windowReader{r: orig[i], size: shards[i].id.size}
	}
	ix.catalogShards(shards)
	for i := range ix.d.shards {
		if w, ok := ix.d.shards[i].r.(*windowReader); ok {
			ix.d.shards[i].r = w.r
		}
	}
}

// windowSize bounds the read-ahead of windowReader.
const windowSize = 1 << 20

// windowReader serves reads from one window of up to windowSize bytes of
// r, refilled by one ranged read when a read falls outside it. It is for
// one goroutine.
type windowReader struct {
	r    shardReader
	size int64
	off  int64
	buf  []byte
}

func (w *windowReader) ReadAt(p []byte, off int64) (int, error) {
	end := min(off+int64(len(p)), w.size) // a read past the end is cut short
	if off >= w.off && off < end && end <= w.off+int64(len(w.buf)) {
		n := copy(p, w.buf[off-w.off:end-w.off])
		if n < len(p) {
			return n, io.EOF
		}
		return n, nil
	}
	if int64(len(p)) > windowSize || off >= w.size {
		return w.r.ReadAt(p, off)
	}
	n := min(windowSize, w.size-off)
	if cap(w.buf) < int(n) {
		w.buf = make([]byte, windowSize)
	}
	w.buf = w.buf[:n]
	k, err := w.r.ReadAt(w.buf, off)
	w.off, w.buf = off, w.buf[:k]
	c := copy(p, w.buf)
	if c < len(p) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.EOF
		}
		return c, err
	}
	return c, nil
}

func (w *windowReader) Close() error { return w.r.Close() }

// objectReader is one object of a store as a shardReader: ranged reads
// checked against the object indexed.
type objectReader struct {
	st Store
	o  Object
}

func (r *objectReader) ReadAt(p []byte, off int64) (int, error) { return r.st.ReadAt(r.o, p, off) }

// Close does nothing: the store is closed with the dataset.
func (r *objectReader) Close() error { return nil }

// object is loose sample s as its store's object.
func (s *sample) object() Object {
	return Object{Key: s.rel, Size: s.size, ETag: s.etag, ModTime: s.mtime}
}
