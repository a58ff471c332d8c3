package cache

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

var randReader = rand.Reader

// maxIndex bounds the index file's size (about 150 bytes an entry); a
// larger one is refused before it is read, and the store is off.
const maxIndex = 1 << 30

// indexVersion is the index file's format; an index of another one is
// rebuilt from the entries.
const indexVersion = 2

// indexFile is the index as stored: JSON, its entries from the least to
// the most recently used.
type indexFile struct {
	Version int          `json:"version"`
	Entries []indexEntry `json:"entries"`
}

type indexEntry struct {
	Fingerprint string `json:"fingerprint"`
	Sample      uint64 `json:"sample"`
	Pipeline    string `json:"pipeline"`
	Split       int    `json:"split"`
	Build       string `json:"build,omitempty"`
	Size        int64  `json:"size"`
}

// DecodeIndex parses an index file. Unknown fields, another version, a
// sample listed twice, names (fingerprint, pipeline, build) over MaxName and sizes outside (0, 1 TiB]
// are errors.
func DecodeIndex(b []byte) ([]indexEntry, error) {
	if len(b) > maxIndex {
		return nil, fmt.Errorf("cache: index of %d bytes, limit %d", len(b), maxIndex)
	}
	var f indexFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("cache: index: %w", err)
	}
	if dec.More() {
		return nil, errors.New("cache: index: data after the index")
	}
	if f.Version != indexVersion {
		return nil, fmt.Errorf("cache: index version %d, want %d", f.Version, indexVersion)
	}
	seen := make(map[key]bool, len(f.Entries))
	for _, e := range f.Entries {
		k := key{e.Fingerprint, e.Sample}
		if seen[k] {
			return nil, fmt.Errorf("cache: index lists sample %d twice", e.Sample)
		}
		seen[k] = true
		if len(e.Fingerprint) > MaxName || len(e.Pipeline) > MaxName || len(e.Build) > MaxName || e.Size <= 0 || e.Size > 1<<40 {
			return nil, fmt.Errorf("cache: index: sample %d: bad entry", e.Sample)
		}
	}
	return f.Entries, nil
}

// readIndex reads the index file: nil without one. It is opened without
// following a symlink and its size checked before it is read; an index
// that cannot be opened, is not a regular file or is over maxIndex is an
// error (the store is off), an index that does not decode is rebuilt
// (load). A symlink planted as the index is removed.
func (s *Store) readIndex() ([]byte, error) {
	f, err := s.root.OpenFile(indexName, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, syscall.ELOOP):
		s.log.Warn().Str("dir", s.dir).Msg("symlink planted as the cache index removed (never followed): rebuilt from the entries")
		_ = s.root.Remove(indexName)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("index: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxIndex {
		return nil, fmt.Errorf("index %s: %d bytes, not a regular file of at most %d: refused unread (remove it)", indexName, fi.Size(), maxIndex)
	}
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	return b, nil
}

// load reconciles index idx (nil: none) with the directory: an entry
// file the index does not know (a crash before the index was written) is
// indexed from its header, an indexed entry whose file is gone or of
// another size is forgotten, temp files and symlinks are removed, entries
// of another format removed. Entries over the budget (a smaller
// --cache-bytes than last time) are evicted. With a key made now
// (newKey) every entry was written under another key: all are removed.
func (s *Store) load(idx []byte, newKey bool) error {
	byName := map[string]*meta{}
	var listed []*meta
	if idx != nil && !newKey {
		ents, err := DecodeIndex(idx)
		if err != nil {
			s.log.Warn().Err(err).Msg("cache index unreadable: rebuilt from the entries")
		}
		for _, e := range ents {
			m := &meta{key: key{e.Fingerprint, e.Sample}, pipe: e.Pipeline, split: e.Split, build: e.Build, size: e.Size}
			byName[entryName(m.key)] = m
			listed = append(listed, m)
		}
	}
	d, err := s.root.Open(".")
	if err != nil {
		return err
	}
	des, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	found := map[string]*meta{}
	removed := 0
	for _, de := range des {
		name := de.Name()
		switch {
		case de.Type()&fs.ModeSymlink != 0:
			s.log.Warn().Str("dir", s.dir).Str("entry", name).Msg("symlink in the cache directory removed (never followed)")
			_ = s.root.Remove(name)
			continue
		case isTemp(name):
			_ = s.root.Remove(name)
			continue
		case !strings.HasSuffix(name, entryExt) || !de.Type().IsRegular():
			continue
		case newKey:
			_ = s.root.Remove(name)
			removed++
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue
		}
		if m := byName[name]; m != nil && m.size == fi.Size() {
			found[name] = m
			continue
		}
		if m := s.scan(name, fi.Size()); m != nil {
			found[name] = m
			listed = append(listed, m)
		}
	}
	if removed > 0 {
		s.log.Warn().Str("dir", s.dir).Int("entries", removed).Msg("cache key made anew: the entries written under the old one removed (fetched again)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range listed { // least recently used first: each goes to the front
		if found[entryName(m.key)] == m {
			s.insertLocked(m)
		}
	}
	s.makeRoomLocked(0, nil)
	s.dirty = true
	return nil
}

// scan indexes entry file name of size bytes from its header; a file
// whose header does not decode, or names another file, is removed (an
// entry of another format version quietly: stale, not bad).
func (s *Store) scan(name string, size int64) *meta {
	bad := func(err error) *meta {
		s.log.Warn().Err(err).Str("entry", name).Msg("cache entry dropped: its sample will be fetched again")
		_ = s.root.Remove(name)
		s.refills.Add(1)
		s.openDrops.Add(1)
		return nil
	}
	f, err := s.root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return bad(err)
	}
	defer f.Close()
	b := make([]byte, headerSize+3*MaxName)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return bad(err)
	}
	h, want, err := DecodeHeader(b[:n], s.maxPayload)
	if errors.Is(err, errFormat) {
		_ = s.root.Remove(name)
		return nil
	}
	if err != nil {
		return bad(err)
	}
	k := key{h.Fingerprint, h.Sample}
	if want != size || entryName(k) != name {
		return bad(fmt.Errorf("%w: %s holds sample %d in %d bytes, header says %d", ErrEntry, name, h.Sample, size, want))
	}
	return &meta{key: k, pipe: h.Pipeline, split: h.Split, build: h.Build, size: size}
}

// Flush writes the index (atomically) when it changed.
func (s *Store) Flush() error {
	s.mu.Lock()
	if !s.dirty || s.off || s.root == nil {
		s.mu.Unlock()
		return nil
	}
	f := indexFile{Version: indexVersion, Entries: make([]indexEntry, 0, len(s.index))}
	for el := s.order.Back(); el != nil; el = el.Prev() {
		m := el.Value.(*meta)
		f.Entries = append(f.Entries, indexEntry{Fingerprint: m.fp, Sample: m.sample, Pipeline: m.pipe, Split: m.split, Build: m.build, Size: m.size})
	}
	s.dirty = false
	s.mu.Unlock()
	b, err := json.Marshal(f)
	if err == nil {
		err = s.write(indexName, b)
	}
	if err == nil {
		err = s.syncDir()
	}
	if err != nil {
		s.mu.Lock()
		s.degradeLocked(fmt.Errorf("writing the index: %w", err))
		s.mu.Unlock()
	}
	return nil
}
