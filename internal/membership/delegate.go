package membership

import (
	"sync"

	"github.com/hashicorp/memberlist"
)

// delegate supplies the local node meta to memberlist and turns its
// membership events into change notifications. memberlist calls it with its
// own locks held, so nothing here calls back into memberlist or blocks.
type delegate struct {
	mu      sync.Mutex
	meta    []byte        // encoded local Meta
	changed chan struct{} // closed and replaced on every event; see waitCh
	notify  chan struct{} // Node.Changes; buffered 1, sent to without blocking
}

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
)

func newDelegate(meta []byte) *delegate {
	return &delegate{
		meta:    meta,
		changed: make(chan struct{}),
		notify:  make(chan struct{}, 1),
	}
}

// setMeta replaces the announced meta.
func (d *delegate) setMeta(meta []byte) {
	d.mu.Lock()
	d.meta = meta
	d.mu.Unlock()
}

// waitCh returns a channel closed at the next membership change.
func (d *delegate) waitCh() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

// fire wakes every waiter and the Changes consumer.
func (d *delegate) fire() {
	d.mu.Lock()
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
	select {
	case d.notify <- struct{}{}:
	default:
	}
}

// NodeMeta implements memberlist.Delegate. The meta was validated to fit
// MetaMaxSize when it was set.
func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.meta) > limit {
		return nil
	}
	return append([]byte(nil), d.meta...)
}

// NotifyMsg implements memberlist.Delegate; no user messages are sent.
func (d *delegate) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate; there are none.
func (d *delegate) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState implements memberlist.Delegate; there is no extra state.
func (d *delegate) LocalState(bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate; there is no extra state.
func (d *delegate) MergeRemoteState([]byte, bool) {}

// NotifyJoin implements memberlist.EventDelegate.
func (d *delegate) NotifyJoin(*memberlist.Node) { d.fire() }

// NotifyLeave implements memberlist.EventDelegate.
func (d *delegate) NotifyLeave(*memberlist.Node) { d.fire() }

// NotifyUpdate implements memberlist.EventDelegate.
func (d *delegate) NotifyUpdate(*memberlist.Node) { d.fire() }
