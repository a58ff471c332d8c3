package journal

import "sync"

// Lazy is a run's journal, opened the first time an epoch asks for it (the
// run's identity takes the catalog's fingerprint and the first epoch's
// plan) and kept until Close. With Samples and Dir empty there is none;
// a nil *Lazy has none either.
type Lazy struct {
	// Samples and Dir are Open's samples and dir.
	Samples, Dir string
	// Run is the run's identity less Fingerprint and Plan, which Open
	// fills in.
	Run RunState

	mu     sync.Mutex
	j      *Journal
	err    error
	closed bool
}

// Open opens the journal on the first call and returns it, or the error
// it failed with, on every later one; nil without a journal. After Close
// it fails with ErrClosed.
func (l *Lazy) Open(fingerprint, plan string) (*Journal, error) {
	if l == nil {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.j != nil || l.err != nil || (l.Samples == "" && l.Dir == "") {
		return l.j, l.err
	}
	if l.closed {
		return nil, ErrClosed
	}
	id := l.Run
	id.Fingerprint, id.Plan = fingerprint, plan
	l.j, l.err = Open(l.Samples, l.Dir, id)
	return l.j, l.err
}

// Close closes the journal, if one was opened. Safe twice.
func (l *Lazy) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.j.Close()
}
