// Package cache is the compute node's sample cache (compute-agent
// --cache-dir, --cache-bytes): samples kept on a local disk or a tmpfs at
// the pipeline's cache split (ops.Pipeline.CacheSplit: the encoded file of
// a random pipeline, the finished output of a deterministic one), so that
// an epoch reads them locally instead of over the link.
//
// Two policies choose what is kept. Planned (the default) keeps what the
// plan marks resident (policy.Plan.Cached), fixed across epochs so that a
// random order cannot thrash it; LRU keeps the raw files most recently
// fetched under the same budget, the baseline a local file cache gives.
//
// An epoch uses the cache through its Use (Store.Use): the positions it
// is to hold, its hits, misses and refills, and their counts for its
// report.
//
// Every entry is one file holding a header (dataset fingerprint, pipeline
// id, split, sample id, and for a finished output the build of the op
// library and codec that made it), the payload, an HMAC-SHA256 under a key
// kept outside the directory (Options.KeyFile) and a CRC-32C; a read
// checks all of them, and View.GetValue checks a raw payload against the
// catalog's content hash too (a finished one must decode), so a corrupt,
// truncated, swapped, foreign, stale or forged entry is dropped and the
// sample fetched again (a refill), never served; a finished output made by
// another build is a miss. An index of the entries survives a restart; it
// is only a hint, rebuilt from the entries' headers when it is missing or
// damaged. Writes are atomic (temp file, fsync, rename, fsync of the
// directory); the directory is 0700, opened as an os.Root with entries
// opened O_NOFOLLOW, and a symlink planted in it is removed, never
// followed.
//
// An epoch never fails for its cache: a directory that cannot be created,
// opened, locked or written, a key file that cannot be read or made, an
// index that cannot be read (or is over its limit, refused before it is
// read) turn the store off at Open with one warning, and a write that
// fails later (a full disk, a vanished directory) does the same then;
// Stats.Degraded says so.
package cache

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/sophon-dl/sophon/internal/atomicfile"
)

// The cache policies (Options.Policy, --cache-policy).
const (
	// PolicyPlanned keeps the samples the plan marks resident
	// (policy.Plan.Cached) at the pipeline's cache split.
	PolicyPlanned = "planned"
	// PolicyLRU keeps the raw files fetched most recently (every raw
	// fetch goes through it), evicting the least recently used: the
	// baseline of a plain local file cache.
	PolicyLRU = "lru"
)

const (
	indexName = "index"
	tmpPrefix = ".tmp-"
	entryExt  = ".entry"
)

// Options configure a Store.
type Options struct {
	// Dir is the cache directory, created 0700 when missing (a wider mode
	// is narrowed with a warning). Required.
	Dir string
	// Bytes is the budget: the entries' total payload bytes, as the
	// planner counts residency (each file adds its header, names and
	// trailer, about 110 bytes). Required (> 0).
	Bytes int64
	// Policy is PolicyPlanned or PolicyLRU. Empty means PolicyPlanned.
	Policy string
	// MaxPayload bounds one entry's payload. Zero means DefaultMaxPayload.
	MaxPayload int64
	// KeyFile holds the key entries are authenticated under (KeySize
	// bytes, 0600, the agent's or root's), made when missing. It must lie
	// outside Dir: whoever can write the directory must not read the key.
	// Empty means DefaultKeyFile(Dir).
	KeyFile string
	// Build names the build of the op library and codec (a finished
	// output is served only to the build that made it, so that an upgrade
	// that changes numerics never serves old tensors; encoded files are
	// served to any). Empty is a build like any other.
	Build string
	// Log receives the warnings (degraded, dropped entries).
	Log zerolog.Logger
}

// key names an entry in the index: the dataset and the sample.
type key struct {
	fp     string
	sample uint64
}

// meta is what the index knows of an entry; elem is its place in the
// recency list (front: most recently used).
type meta struct {
	key
	pipe  string
	split int
	build string // Header.Build
	size  int64  // the file's
	elem  *list.Element
	// cancelled: a queued write given up (Store.pending) before the
	// writer reached it, or while it wrote.
	cancelled bool
}

// bytes is what m counts against the budget: its payload's size.
func (m *meta) bytes() int64 {
	return max(0, m.size-int64(headerSize+len(m.fp)+len(m.pipe)+len(m.build)+trailer))
}

// Store is the node's one cache, shared by every epoch and local rank
// the agent serves. Its methods are safe for concurrent use.
type Store struct {
	log        zerolog.Logger
	dir        string
	root       *os.Root
	lock       *os.File // the directory, flocked while open
	key        []byte   // entries' MAC key (Options.KeyFile)
	build      string   // Options.Build
	budget     int64
	maxPayload int64
	lru        bool

	mu    sync.Mutex
	index map[key]*meta
	order *list.List // of *meta
	used  int64
	// reserved is the bytes of the writes queued or under way: they
	// count against the budget until they are indexed or fail.
	reserved int64
	// pending are the queued writes by key, which makeRoomLocked may
	// cancel like it evicts entries (a plan's Put must not be skipped for
	// a queued write of a sample the plan no longer keeps).
	pending map[key]*meta
	// jobs feeds the writer (see Put); drained is signalled after each
	// write. Both under mu; closing: Close began.
	jobs    chan job
	drained *sync.Cond
	closing bool
	writer  sync.WaitGroup
	off     bool // degraded to no cache
	dirty   bool // index changed since the last Flush

	// Cumulative counters, for the metrics.
	hits, misses, refills, readBytes, fills, skipped, forged atomic.Int64
	// openDrops counts the bad entries Open dropped, until an epoch
	// reports them (TakeOpenDrops).
	openDrops atomic.Int64

	// create opens a new temp file for writing; tests replace it to
	// inject failures.
	create func(name string) (atomicfile.File, error)
}

// Open opens (creating) the cache in o.Dir and loads its index,
// reconciled with the entries on disk. Only bad options are errors: a
// directory, key or index that cannot be used gives a store that is off
// (Stats.Degraded), after one warning.
func Open(o Options) (*Store, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	s := &Store{log: o.Log, dir: o.Dir, budget: o.Bytes, maxPayload: o.MaxPayload, lru: o.Policy == PolicyLRU,
		build: o.Build, index: map[key]*meta{}, order: list.New(), pending: map[key]*meta{}}
	if s.maxPayload <= 0 {
		s.maxPayload = DefaultMaxPayload
	}
	s.create = func(name string) (atomicfile.File, error) {
		return s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	}
	s.drained = sync.NewCond(&s.mu)
	s.jobs = make(chan job, maxJobs)
	if err := s.attach(o); err != nil {
		s.mu.Lock()
		s.detachLocked()
		s.degradeLocked(err)
		s.mu.Unlock()
	}
	s.writer.Go(s.write1)
	return s, nil
}

// check validates o and fills in KeyFile.
func (o *Options) check() error {
	if o.Dir == "" {
		return errors.New("cache: no directory")
	}
	if o.Bytes <= 0 {
		return fmt.Errorf("cache: budget %d bytes, want > 0", o.Bytes)
	}
	switch o.Policy {
	case "", PolicyPlanned, PolicyLRU:
	default:
		return fmt.Errorf("cache: policy %q, want %s or %s", o.Policy, PolicyPlanned, PolicyLRU)
	}
	if len(o.Build) > MaxName {
		return fmt.Errorf("cache: build name of %d bytes, limit %d", len(o.Build), MaxName)
	}
	if o.KeyFile == "" {
		o.KeyFile = DefaultKeyFile(o.Dir)
	}
	dir, kerr := filepath.Abs(o.Dir)
	key, derr := filepath.Abs(o.KeyFile)
	if kerr == nil && derr == nil && strings.HasPrefix(key, dir+string(filepath.Separator)) {
		return fmt.Errorf("cache: key file %s is inside the cache directory %s: keep it where whoever writes the directory cannot read it", o.KeyFile, o.Dir)
	}
	return nil
}

// attach makes the directory (0700), locks it (one agent per directory:
// the index is the writer's), opens it as a root, checks that a file can
// be written in it, reads the key and loads the index. On an error the
// caller detaches and degrades.
func (s *Store) attach(o Options) error {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(o.Dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", o.Dir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(o.Dir, 0o700); err != nil {
			return fmt.Errorf("%s has mode %v, readable by others, and cannot be narrowed to 0700: %w", o.Dir, perm, err)
		}
		o.Log.Warn().Str("dir", o.Dir).Str("mode", perm.String()).Msg("cache directory readable by others: narrowed to 0700")
	}
	if s.lock, err = os.Open(o.Dir); err != nil {
		return err
	}
	if err := syscall.Flock(int(s.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("%s is in use by another compute agent (%w)", o.Dir, err)
	}
	if s.root, err = os.OpenRoot(o.Dir); err != nil {
		return err
	}
	if err := s.probe(); err != nil {
		return fmt.Errorf("%s is not writable: %w", o.Dir, err)
	}
	key, created, err := loadKey(o.KeyFile)
	if err != nil {
		return err
	}
	s.key = key
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	return s.load(idx, created)
}

// probe writes and removes a temp file: a read-only directory turns the
// store off at Open, not at its first fill.
func (s *Store) probe() error {
	var rnd [6]byte
	_, _ = io.ReadFull(randReader, rnd[:])
	name := tmpPrefix + hex.EncodeToString(rnd[:]) + "-probe"
	f, err := s.create(name)
	if err != nil {
		return err
	}
	err = f.Close()
	return errors.Join(err, s.root.Remove(name))
}

// detachLocked closes the directory and its lock, if open.
func (s *Store) detachLocked() {
	if s.root != nil {
		s.root.Close()
		s.root = nil
	}
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

// Writes are queued to one writer goroutine, so that a fill never holds
// up the epoch that makes it: at most maxJobs entries and maxQueued
// bytes; a Put past them is skipped (the sample is fetched again next
// time it is wanted).
const (
	maxJobs   = 1024
	maxQueued = 64 << 20
)

// job is a queued write.
type job struct {
	m *meta
	b []byte
}

// write1 is the writer: it writes the queued entries and indexes them.
func (s *Store) write1() {
	for j := range s.jobs {
		s.mu.Lock()
		skip := s.off || j.m.cancelled // a degraded store writes nothing more
		s.mu.Unlock()
		var err error
		if !skip {
			err = s.write(entryName(j.m.key), j.b)
		}
		s.mu.Lock()
		if s.pending[j.m.key] == j.m {
			delete(s.pending, j.m.key)
		}
		if !j.m.cancelled {
			s.reserved -= j.m.bytes()
		}
		switch {
		case j.m.cancelled:
			if !skip && err == nil && s.root != nil { // cancelled while written
				_ = s.root.Remove(entryName(j.m.key))
			}
		case err != nil:
			s.degradeLocked(fmt.Errorf("writing sample %d: %w", j.m.sample, err))
		case !s.off:
			s.insertLocked(j.m)
			s.fills.Add(1)
		}
		s.drained.Broadcast()
		s.mu.Unlock()
	}
}

// Drain waits until no write is queued or under way: the entries put so
// far are indexed (or the store degraded).
func (s *Store) Drain() {
	s.mu.Lock()
	for s.reserved > 0 {
		s.drained.Wait()
	}
	s.mu.Unlock()
}

// LRU reports whether the store runs the LRU policy.
func (s *Store) LRU() bool { return s.lru }

// Budget is the store's byte budget.
func (s *Store) Budget() int64 { return s.budget }

// Dir is the cache directory.
func (s *Store) Dir() string { return s.dir }

// Close finishes the queued writes, writes the index and closes the
// directory. Safe twice.
func (s *Store) Close() error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.jobs)
	}
	s.mu.Unlock()
	s.writer.Wait()
	err := s.Flush()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root != nil {
		err = errors.Join(err, s.root.Close(), s.lock.Close())
		s.root, s.lock = nil, nil
	}
	s.off = true
	return err
}

// entryName is the file of key k.
func entryName(k key) string {
	h := sha256.Sum256([]byte(k.fp))
	return hex.EncodeToString(h[:8]) + "-" + strconv.FormatUint(k.sample, 10) + entryExt
}

// Stats are the store's cumulative counters and its residency now.
type Stats struct {
	// Hits: entries served; Misses: wanted samples absent, fetched and
	// filled; Refills: entries dropped as bad (and fetched again); Fills:
	// entries written; Skipped: entries not written for want of budget.
	Hits, Misses, Refills, Fills, Skipped int64
	// ReadBytes is the entry bytes read for the hits.
	ReadBytes int64
	// Samples and Bytes (payload bytes, as the budget counts them) are
	// resident now.
	Samples int
	Bytes   int64
	// Forged: entries dropped whose checksum held but whose MAC did not
	// (ErrForged; also counted in Refills).
	Forged int64
	// Degraded: the store turned itself off (a directory, key or index it
	// could not use at Open, a full disk, a vanished directory).
	Degraded bool
}

// TakeOpenDrops is how many bad entries (truncated, swapped, corrupt
// headers) Open dropped that no epoch reported yet; they count as refills
// of the first epoch that reports them.
func (s *Store) TakeOpenDrops() int64 { return s.openDrops.Swap(0) }

// Stats is the store's counters and residency.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	n, b, off := len(s.index), s.used, s.off
	s.mu.Unlock()
	return Stats{Hits: s.hits.Load(), Misses: s.misses.Load(), Refills: s.refills.Load(), Fills: s.fills.Load(),
		Skipped: s.skipped.Load(), ReadBytes: s.readBytes.Load(), Forged: s.forged.Load(), Samples: n, Bytes: b, Degraded: off}
}

// degradeLocked turns the store off after err: no entry is served or
// written again in this run (the files stay for the next one).
func (s *Store) degradeLocked(err error) {
	if s.off {
		return
	}
	s.off = true
	s.index, s.used = map[key]*meta{}, 0
	s.order.Init()
	s.log.Warn().Err(err).Str("dir", s.dir).Msg("cache degraded to no cache for the rest of the run: epochs go on without it")
}

// removeLocked forgets m and removes its file.
func (s *Store) removeLocked(m *meta) {
	delete(s.index, m.key)
	s.order.Remove(m.elem)
	s.used -= m.bytes()
	s.dirty = true
	if err := s.root.Remove(entryName(m.key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Debug().Err(err).Uint64("sample", m.sample).Msg("cache entry not removed")
	}
}

// insertLocked indexes m as the most recently used entry, replacing an
// entry of the same key.
func (s *Store) insertLocked(m *meta) {
	if old := s.index[m.key]; old != nil {
		s.order.Remove(old.elem)
		s.used -= old.bytes()
	}
	m.elem = s.order.PushFront(m)
	s.index[m.key] = m
	s.used += m.bytes()
	s.dirty = true
}

// makeRoomLocked evicts entries, least recently used first, until size
// more bytes fit the budget; it evicts only those evictable allows (nil:
// any). It reports whether they fit.
func (s *Store) makeRoomLocked(size int64, evictable func(*meta) bool) bool {
	for el := s.order.Back(); el != nil && s.used+s.reserved+size > s.budget; {
		m := el.Value.(*meta)
		el = el.Prev()
		if evictable == nil || evictable(m) {
			s.removeLocked(m)
		}
	}
	for _, m := range s.pending {
		if s.used+s.reserved+size <= s.budget {
			break
		}
		if evictable == nil || evictable(m) {
			s.cancelLocked(m)
		}
	}
	return s.used+s.reserved+size <= s.budget
}

// cancelLocked gives up m's queued write: the writer skips it (or removes
// the file it was writing), and its bytes no longer count.
func (s *Store) cancelLocked(m *meta) {
	m.cancelled = true
	delete(s.pending, m.key)
	s.reserved -= m.bytes()
	s.skipped.Add(1)
	s.drained.Broadcast()
}

// write stores b as file name: a temp file written and synced, then
// renamed over name. The directory is synced with the index (Flush): a
// rename lost in a crash loses an entry, never serves a wrong one.
func (s *Store) write(name string, b []byte) error {
	var rnd [6]byte
	_, _ = io.ReadFull(randReader, rnd[:])
	return atomicfile.Write(s.root, tmpPrefix+hex.EncodeToString(rnd[:])+"-"+name, name, b, s.create)
}

// syncDir syncs the directory: the renames before it are durable.
func (s *Store) syncDir() error {
	d, err := s.root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// isTemp reports whether name is a write's temp file.
func isTemp(name string) bool { return strings.HasPrefix(name, tmpPrefix) }
