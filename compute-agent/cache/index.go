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

// maxIndex bounds the index file's size (about 150 bytes an entry).
const maxIndex = 1 << 30

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
	Size        int64  `json:"size"`
}

// DecodeIndex parses an index file. Unknown fields, another version, a
// sample listed twice, names over MaxName and sizes outside (0, 1 TiB]
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
	if f.Version != version {
		return nil, fmt.Errorf("cache: index version %d, want %d", f.Version, version)
	}
	seen := make(map[key]bool, len(f.Entries))
	for _, e := range f.Entries {
		k := key{e.Fingerprint, e.Sample}
		if seen[k] {
			return nil, fmt.Errorf("cache: index lists sample %d twice", e.Sample)
		}
		seen[k] = true
		if len(e.Fingerprint) > MaxName || len(e.Pipeline) > MaxName || e.Size <= 0 || e.Size > 1<<40 {
			return nil, fmt.Errorf("cache: index: sample %d: bad entry", e.Sample)
		}
	}
	return f.Entries, nil
}

// load reads the index and reconciles it with the directory: an entry
// file the index does not know (a crash before the index was written) is
// indexed from its header, an indexed entry whose file is gone or of
// another size is forgotten, temp files and symlinks are removed. Entries
// over the budget (a smaller --cache-bytes than last time) are evicted.
func (s *Store) load() {
	byName := map[string]*meta{}
	var listed []*meta
	if b, err := s.root.ReadFile(indexName); err == nil {
		ents, err := DecodeIndex(b)
		if err != nil {
			s.log.Warn().Err(err).Msg("cache index unreadable: rebuilt from the entries")
		}
		for _, e := range ents {
			m := &meta{key: key{e.Fingerprint, e.Sample}, pipe: e.Pipeline, split: e.Split, size: e.Size}
			byName[entryName(m.key)] = m
			listed = append(listed, m)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn().Err(err).Msg("cache index unreadable: rebuilt from the entries")
	}
	d, err := s.root.Open(".")
	if err != nil {
		s.mu.Lock()
		s.degradeLocked(err)
		s.mu.Unlock()
		return
	}
	des, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		s.mu.Lock()
		s.degradeLocked(err)
		s.mu.Unlock()
		return
	}
	found := map[string]*meta{}
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
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range listed { // least recently used first: each goes to the front
		if found[entryName(m.key)] == m {
			s.insertLocked(m)
		}
	}
	s.makeRoomLocked(0, nil)
	s.dirty = true
}

// scan indexes entry file name of size bytes from its header; a file
// whose header does not decode, or names another file, is removed.
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
	b := make([]byte, headerSize+2*MaxName)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return bad(err)
	}
	h, want, err := DecodeHeader(b[:n], s.maxPayload)
	if err != nil {
		return bad(err)
	}
	k := key{h.Fingerprint, h.Sample}
	if want != size || entryName(k) != name {
		return bad(fmt.Errorf("%w: %s holds sample %d in %d bytes, header says %d", ErrEntry, name, h.Sample, size, want))
	}
	return &meta{key: k, pipe: h.Pipeline, split: h.Split, size: size}
}

// Flush writes the index (atomically) when it changed.
func (s *Store) Flush() error {
	s.mu.Lock()
	if !s.dirty || s.off || s.root == nil {
		s.mu.Unlock()
		return nil
	}
	f := indexFile{Version: version, Entries: make([]indexEntry, 0, len(s.index))}
	for el := s.order.Back(); el != nil; el = el.Prev() {
		m := el.Value.(*meta)
		f.Entries = append(f.Entries, indexEntry{Fingerprint: m.fp, Sample: m.sample, Pipeline: m.pipe, Split: m.split, Size: m.size})
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
