package cache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// View is the store as one epoch sees it: the entries of one dataset
// (fingerprint), pipeline (id) and split, and at a finished split of the
// store's build (Options.Build). An entry of the same sample with another
// pipeline, split or build is stale: it is not served, and a Put replaces
// it.
type View struct {
	s     *Store
	fp    string
	pipe  string
	split int
	build string // the store's at a finished split, empty at split 0
	// keep, in the planned policy, is whether the current plan keeps a
	// sample resident: a Put that does not fit evicts only entries it does
	// not keep (nil: any may be).
	keep func(sample uint64) bool
}

// View is the view of fingerprint fp, pipeline pipe and split; keep says
// which samples the plan keeps resident (PolicyPlanned; ignored by LRU).
func (s *Store) View(fp, pipe string, split int, keep func(sample uint64) bool) *View {
	v := &View{s: s, fp: fp, pipe: pipe, split: split, keep: keep}
	if split != 0 {
		v.build = s.build
	}
	return v
}

// SetKeep makes keep the samples the plan keeps resident from now on
// (a warm epoch's view, which kept every sample, takes its plan's).
func (v *View) SetKeep(keep func(sample uint64) bool) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	v.keep = keep
}

// Split is the view's split.
func (v *View) Split() int { return v.split }

// LRU reports whether the store runs the LRU policy.
func (v *View) LRU() bool { return v.s.lru }

// Has reports whether the index holds sample for this view (a hint: Get
// checks the entry itself).
func (v *View) Has(sample uint64) bool {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.index[key{v.fp, sample}]
	return !s.off && v.holds(m)
}

// holds reports whether m is v's entry (same pipeline, split and build).
func (v *View) holds(m *meta) bool {
	return m != nil && m.pipe == v.pipe && m.split == v.split && m.build == v.build
}

// Miss counts a wanted sample that was absent (it is fetched and put).
func (v *View) Miss() { v.s.misses.Add(1) }

// Get reads sample's entry and checks it (header, length, checksum, MAC,
// and that it is this view's dataset, pipeline, split, build and sample).
// A bad entry is dropped (a refill is counted; a forged one, ErrForged,
// counts in Stats.Forged too) and its error, wrapping ErrEntry, returned; an absent one (never put, evicted, a vanished directory)
// gives an error wrapping fs.ErrNotExist. n is the entry's bytes read.
func (v *View) Get(sample uint64) (payload []byte, n int64, err error) {
	s := v.s
	k := key{v.fp, sample}
	s.mu.Lock()
	m := s.index[k]
	if s.off || !v.holds(m) {
		s.mu.Unlock()
		return nil, 0, fmt.Errorf("cache: sample %d: %w", sample, fs.ErrNotExist)
	}
	s.order.MoveToFront(m.elem)
	root := s.root
	s.mu.Unlock()
	b, err := v.read(root, entryName(k))
	if err == nil {
		var h Header
		h, payload, err = Decode(b, s.key, s.maxPayload)
		if err == nil && h != v.header(sample) {
			err = fmt.Errorf("%w: sample %d: entry holds sample %d of %q, pipeline %q, split %d, build %q", ErrEntry, sample, h.Sample, h.Fingerprint, h.Pipeline, h.Split, h.Build)
		}
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// The directory vanished (degraded), or the entry was evicted
			// since the index named it (LRU): a miss, not a bad entry.
			if !v.vanished() {
				v.forget(m)
			}
			return nil, 0, err
		}
		if !errors.Is(err, ErrEntry) {
			err = fmt.Errorf("%w: sample %d: %w", ErrEntry, sample, err)
		}
		if errors.Is(err, ErrForged) {
			s.forged.Add(1)
		}
		v.Drop(sample, err)
		return nil, 0, err
	}
	s.hits.Add(1)
	s.readBytes.Add(int64(len(b)))
	return payload, int64(len(b)), nil
}

// read reads the entry file name, refusing a symlink and a file larger
// than an entry can be before it allocates.
func (v *View) read(root *os.Root, name string) ([]byte, error) {
	if root == nil {
		return nil, ErrDisabled
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	limit := int64(headerSize+3*MaxName+trailer) + v.s.maxPayload
	if !fi.Mode().IsRegular() || fi.Size() > limit {
		return nil, fmt.Errorf("%w: %s: not a regular file of at most %d bytes", ErrEntry, name, limit)
	}
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrEntry, name, err)
	}
	return b, nil
}

// vanished reports whether the cache directory is gone; it degrades the
// store when it is.
func (v *View) vanished() bool {
	s := v.s
	if _, err := os.Stat(s.dir); err == nil {
		return false
	} else {
		s.mu.Lock()
		s.degradeLocked(err)
		s.mu.Unlock()
	}
	return true
}

// forget drops m from the index if it is still there.
func (v *View) forget(m *meta) {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index[m.key] == m && !s.off {
		s.removeLocked(m)
	}
}

// Drop removes sample's entry as bad (why), counting a refill: the caller
// fetches the sample again.
func (v *View) Drop(sample uint64, why error) {
	s := v.s
	s.refills.Add(1)
	s.log.Warn().Err(why).Uint64("sample", sample).Msg("cache entry dropped: fetched again")
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.index[key{v.fp, sample}]; m != nil && !s.off {
		s.removeLocked(m)
	}
}

// Put queues sample's payload as this view's entry, best effort: when it
// does not fit the budget (PolicyLRU evicts the least recently used
// entries first; PolicyPlanned evicts only stale, foreign and unplanned
// ones) or the writer's queue it is skipped, and a failed write degrades
// the store. It reports whether the entry was queued; the writer indexes
// it once written. payload is copied.
func (v *View) Put(sample uint64, payload []byte) bool {
	s := v.s
	if len(s.key) == 0 { // off since Open
		return false
	}
	k := key{v.fp, sample}
	b, err := Encode(v.header(sample), payload, s.key)
	if err != nil || int64(len(payload)) > s.maxPayload {
		s.skipped.Add(1)
		return false
	}
	m := &meta{key: k, pipe: v.pipe, split: v.split, build: v.build, size: int64(len(b))}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off || s.closing {
		return false
	}
	if old := s.index[k]; old != nil {
		s.removeLocked(old) // stale, or a repeat of a padded sample
	}
	if old := s.pending[k]; old != nil {
		s.cancelLocked(old)
	}
	if s.reserved+m.bytes() > maxQueued || !s.makeRoomLocked(m.bytes(), v.evictable()) {
		s.skipped.Add(1)
		return false
	}
	select {
	case s.jobs <- job{m: m, b: b}:
		s.reserved += m.bytes()
		s.pending[k] = m
		return true
	default:
		s.skipped.Add(1)
		return false
	}
}

// evictable is what a Put of v may evict.
func (v *View) evictable() func(*meta) bool {
	if v.s.lru {
		return nil
	}
	return func(m *meta) bool {
		return m.fp != v.fp || !v.holds(m) || v.keep == nil || !v.keep(m.sample)
	}
}

// header is sample's entry header in v.
func (v *View) header(sample uint64) Header {
	return Header{Fingerprint: v.fp, Pipeline: v.pipe, Split: v.split, Sample: sample, Build: v.build}
}
