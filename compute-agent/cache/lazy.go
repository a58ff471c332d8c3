package cache

import (
	"errors"
	"sync"
	"sync/atomic"
)

// ErrClosed: the cache was closed before it was opened (Lazy.Close).
var ErrClosed = errors.New("cache: closed")

// Lazy is the node's cache, opened the first time an epoch asks for it
// and kept until Close. With an empty Dir there is none; a nil *Lazy has
// none either.
type Lazy struct {
	Options
	// DefaultBuild names the build when Options.Build is empty; it is
	// called by the first Open only.
	DefaultBuild func() string

	mu     sync.Mutex
	store  atomic.Pointer[Store]
	closed bool
}

// Open opens the cache on the first call, logging what it holds, and
// returns it on every later one; nil without a cache. A cache that cannot
// be used (directory, key file, index) is open but off (Stats.Degraded),
// after one warning; Open fails only on options it cannot take, and after
// Close (ErrClosed).
func (l *Lazy) Open() (*Store, error) {
	if l == nil {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.store.Load(); s != nil || l.Dir == "" {
		return s, nil
	}
	if l.closed {
		return nil, ErrClosed
	}
	o := l.Options
	if o.Build == "" && l.DefaultBuild != nil {
		o.Build = l.DefaultBuild()
	}
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	st := s.Stats()
	o.Log.Info().Str("dir", s.Dir()).Int64("budget_bytes", s.Budget()).Bool("lru", s.LRU()).
		Int("resident_samples", st.Samples).Int64("resident_bytes", st.Bytes).Bool("degraded", st.Degraded).Str("build", o.Build).Msg("cache open")
	l.store.Store(s)
	return s, nil
}

// Store is the cache once Open opened it, else nil (the metrics'
// Collectors read it).
func (l *Lazy) Store() *Store { return l.store.Load() }

// Close closes the cache, if one was opened. Safe twice.
func (l *Lazy) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if s := l.store.Load(); s != nil {
		return s.Close()
	}
	return nil
}
