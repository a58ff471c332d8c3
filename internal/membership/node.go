package membership

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
)

// updateTimeout bounds how long UpdateMeta waits for its broadcast to leave.
const updateTimeout = 5 * time.Second

// closeLeaveTimeout bounds the leave broadcast in Close.
const closeLeaveTimeout = time.Second

// Member is one alive node of the cluster.
type Member struct {
	// Name is the node's unique name.
	Name string
	// Addr is the node's gossip host:port.
	Addr string
	// Meta is what the node announces.
	Meta Meta
}

// Node is this process's membership in the cluster. Its methods are safe for
// concurrent use.
type Node struct {
	log  zerolog.Logger
	d    *delegate
	ml   *memberlist.Memberlist
	done chan struct{} // closed by Close

	// mu serialises Leave and UpdateMeta against Close: memberlist panics on
	// a Leave after Shutdown.
	mu       sync.RWMutex
	closed   bool
	closeErr error

	warnMu sync.Mutex
	warned map[string]string // node name -> undecodable meta already logged
}

// New validates cfg, starts gossip with memberlist's LAN timing and joins
// cfg.Join. Unencrypted gossip (Insecure without SecretKey) is logged at
// warn level. It fails with [ErrNoPeerJoined] when cfg.Join is not empty and
// none of its peers could be joined.
func New(cfg Config) (*Node, error) {
	cfg, meta, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := newDelegate(cfg.Name, meta)
	mc := cfg.memberlistConfig()
	mc.Delegate = d
	mc.Events = d
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("membership: start gossip: %w", err)
	}
	n := &Node{
		log:    cfg.Logger.With().Str("subsystem", "membership").Logger(),
		d:      d,
		ml:     ml,
		done:   make(chan struct{}),
		warned: make(map[string]string),
	}
	if cfg.SecretKey == nil {
		n.log.Warn().Str("label", cfg.Label).
			Msg("INSECURE: gossip is not encrypted; anyone who reaches the gossip port can join the cluster")
	}
	if len(cfg.Join) > 0 {
		joined, err := ml.Join(cfg.Join)
		if joined == 0 {
			if err == nil {
				err = errors.New("no address resolved")
			}
			_ = ml.Shutdown()
			return nil, fmt.Errorf("%w: %v: %v", ErrNoPeerJoined, cfg.Join, err)
		}
		n.log.Info().Int("contacted", joined).Strs("join", cfg.Join).Msg("joined cluster")
	}
	n.log.Info().Str("name", cfg.Name).Str("addr", d.local().addr).
		Str("role", string(cfg.Meta.Role)).Bool("encrypted", cfg.SecretKey != nil).Str("label", cfg.Label).Msg("gossip started")
	return n, nil
}

// Self returns this node as its peers see it (as last announced, also
// after it left).
func (n *Node) Self() Member {
	self := n.d.local()
	m, err := decodeMeta(self.meta)
	if err != nil {
		// Unreachable: the local meta was validated when set.
		n.log.Error().Err(err).Msg("own meta does not decode")
	}
	return Member{Name: n.d.name, Addr: self.addr, Meta: m}
}

// Members returns the alive members, this node included, sorted by name.
// Members whose meta does not decode are skipped and logged once.
func (n *Node) Members() []Member {
	nodes := n.d.members()
	out := make([]Member, 0, len(nodes))
	for name, nd := range nodes {
		m, err := decodeMeta(nd.meta)
		if err != nil {
			n.warnBadMeta(name, nd, err)
			continue
		}
		out = append(out, Member{Name: name, Addr: nd.addr, Meta: m})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// warnBadMeta logs a peer's undecodable meta once per distinct value.
func (n *Node) warnBadMeta(name string, nd peer, err error) {
	n.warnMu.Lock()
	defer n.warnMu.Unlock()
	if prev, ok := n.warned[name]; ok && prev == string(nd.meta) {
		return
	}
	n.warned[name] = string(nd.meta)
	n.log.Warn().Err(err).Str("node", name).Str("addr", nd.addr).Msg("skipping member with bad meta")
}

// ByRole returns the alive members of role r, sorted by name.
func (n *Node) ByRole(r Role) []Member {
	var out []Member
	for _, m := range n.Members() {
		if m.Meta.Role == r {
			out = append(out, m)
		}
	}
	return out
}

// WaitFor blocks until at least count members of role r are alive, and
// returns them. It returns early with ctx's error, wrapped, when ctx ends and
// with [ErrClosed] when the node is closed.
func (n *Node) WaitFor(ctx context.Context, r Role, count int) ([]Member, error) {
	for {
		// Take the change channel before reading, so a change between the
		// read and the select is not missed.
		changed := n.d.waitCh()
		ms := n.ByRole(r)
		if len(ms) >= count {
			return ms, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ms, fmt.Errorf("membership: waiting for %d %s members, have %d: %w", count, r, len(ms), ctx.Err())
		case <-n.done:
			return nil, ErrClosed
		}
	}
}

// Changes returns a channel that receives a value whenever a member joins,
// leaves or updates its meta. It is buffered 1 and sent to without blocking,
// so several changes may arrive as one value: on receipt, re-read
// [Node.Members]. Every call returns the same channel, meant for a single
// consumer; [Node.WaitFor] does not take from it.
func (n *Node) Changes() <-chan struct{} { return n.d.notify }

// UpdateMeta validates m and re-announces it, waiting up to a few seconds for
// the broadcast to leave. On a timeout the new meta is still in place and
// spreads with the next push-pull.
func (n *Node) UpdateMeta(m Meta) error {
	b, err := m.encode()
	if err != nil {
		return err
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return ErrClosed
	}
	n.d.setMeta(b)
	if err := n.ml.UpdateNode(updateTimeout); err != nil {
		return fmt.Errorf("membership: update meta: %w", err)
	}
	return nil
}

// Leave announces that this node is leaving and waits up to timeout for the
// announcement to go out. The node keeps answering gossip until Close.
func (n *Node) Leave(timeout time.Duration) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return ErrClosed
	}
	if err := n.ml.Leave(timeout); err != nil {
		return fmt.Errorf("membership: leave: %w", err)
	}
	return nil
}

// Close leaves the cluster (waiting up to a second for the announcement to go
// out, and logging rather than failing when it does not) and stops gossip. It is safe to call more than once; later calls return the
// first call's result.
func (n *Node) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return n.closeErr
	}
	n.closed = true
	close(n.done)
	// NB: a leave that is not confirmed in time is no error here. It happens
	// when the last peers leave together (each marks the other left before
	// its own announcement goes out); peers that missed it detect the
	// departure by probing.
	if err := n.ml.Leave(closeLeaveTimeout); err != nil {
		n.log.Info().Err(err).Msg("leave not confirmed; peers will detect the departure by probing")
	}
	if err := n.ml.Shutdown(); err != nil {
		n.closeErr = fmt.Errorf("membership: shutdown: %w", err)
	}
	return n.closeErr
}
