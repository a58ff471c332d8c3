package membership

import (
	"bytes"
	"sync"

	"github.com/hashicorp/memberlist"
)

// delegate supplies the local node meta to memberlist, turns its membership
// events into change notifications and keeps a copy of every alive node.
// memberlist calls it with its own locks held, so nothing here calls back
// into memberlist or blocks.
//
// NB: memberlist's Members and LocalNode return pointers to the nodes it
// keeps updating under its lock, so reading their fields afterwards races
// with gossip (a peer's meta update, our own UpdateMeta). The event
// callbacks run under that lock, so the copies taken there are safe to read.
type delegate struct {
	name    string // this node's
	mu      sync.Mutex
	meta    []byte        // encoded local Meta
	changed chan struct{} // closed and replaced on every event; see waitCh
	notify  chan struct{} // Node.Changes; buffered 1, sent to without blocking
	alive   map[string]peer
	self    peer // this node as last announced, kept after it leaves
}

// peer is a copy of a memberlist node: its gossip address and meta.
type peer struct {
	addr string
	meta []byte
}

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
)

func newDelegate(name string, meta []byte) *delegate {
	return &delegate{
		name:    name,
		meta:    meta,
		changed: make(chan struct{}),
		notify:  make(chan struct{}, 1),
		alive:   make(map[string]peer),
	}
}

// record copies an alive node; memberlist holds its lock.
func (d *delegate) record(n *memberlist.Node) {
	p := peer{addr: n.Address(), meta: bytes.Clone(n.Meta)}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.alive[n.Name] = p
	if n.Name == d.name {
		d.self = p
	}
}

// members returns a copy of the alive nodes by name.
func (d *delegate) members() map[string]peer {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]peer, len(d.alive))
	for k, v := range d.alive {
		out[k] = v
	}
	return out
}

// local returns this node as last announced.
func (d *delegate) local() peer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.self
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
func (d *delegate) NotifyJoin(n *memberlist.Node) {
	d.record(n)
	d.fire()
}

// NotifyLeave implements memberlist.EventDelegate: n left or is dead.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	d.mu.Lock()
	delete(d.alive, n.Name)
	d.mu.Unlock()
	d.fire()
}

// NotifyUpdate implements memberlist.EventDelegate.
func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	d.record(n)
	d.fire()
}
