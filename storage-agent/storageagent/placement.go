package storageagent

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sophon-dl/sophon/internal/membership"
	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/internal/placement/wire"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
)

// infoMembersSlack is room left in an Info response for the placement
// members' names when the agent checks its layout fits in one message.
const infoMembersSlack = 1 << 20

// holder keeps what the agent announces about placement: the layout, fixed
// when the dataset is opened, and the shards the agent holds, recomputed
// from the live members of its placement group whenever membership changes.
// NB: holding is advisory. The agent serves any sample of its catalog; a
// compute agent picks owners from the held sets announced at an epoch's
// start, and membership views can lag between agents.
type holder struct {
	self     string
	layout   placement.Layout
	digest   string                    // the layout's
	wire     []*dataplanepb.ShardRange // the layout in Info, built once
	replicas int
	m        *metrics
	// missing marks the shards whose files the agent lacks (it runs from
	// a manifest); it never holds them. missingWire is them in Info.
	missing     []bool
	missingWire []uint32

	mu      sync.Mutex
	held    []int // ascending
	heldDig string
	members []string // sorted, self included
}

// newHolder starts with self alone, so every shard it stores is held until
// the membership says otherwise (and for good without membership). missing
// lists, ascending, the shards of layout whose files the agent lacks.
func newHolder(self string, layout placement.Layout, replicas int, missing []int, m *metrics) (*holder, error) {
	h := &holder{self: self, layout: layout, digest: layout.Digest(), wire: wire.ShardRanges(layout), replicas: replicas, m: m}
	if len(missing) > 0 {
		h.missing = make([]bool, layout.Len())
		h.missingWire = make([]uint32, len(missing))
		for i, s := range missing {
			h.missing[s] = true
			h.missingWire[i] = uint32(s) // below placement.MaxShards
		}
	}
	// Bound the Info response: the layout, every shard held or missing
	// (5 bytes each at most, packed) and the members' names must fit one
	// message.
	size := proto.Size(&dataplanepb.InfoResponse{Layout: h.wire}) + 5*layout.Len() + infoMembersSlack
	if limit := MaxMessageBytes - wireSlack; size > limit {
		return nil, fmt.Errorf("%w: %d shards take about %d bytes in Info, more than %d: use larger shards",
			dataset.ErrLayout, layout.Len(), size, limit)
	}
	m.shards.Set(float64(layout.Len()))
	m.missing.Set(float64(len(missing)))
	h.update([]string{self})
	return h, nil
}

// update recomputes the held shards over members (self is added when
// missing) and returns how many shards were gained and lost.
func (h *holder) update(members []string) (gained, lost int) {
	ms := slices.Clone(members)
	if !slices.Contains(ms, h.self) {
		ms = append(ms, h.self)
	}
	slices.Sort(ms)
	ms = slices.Compact(ms)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held != nil && slices.Equal(ms, h.members) {
		return 0, 0
	}
	held := placement.Held(h.self, ms, h.layout.Len(), h.replicas)
	if h.missing != nil {
		held = slices.DeleteFunc(held, func(s int) bool { return h.missing[s] })
	}
	if held == nil {
		held = []int{}
	}
	gained, lost = diffSorted(h.held, held)
	h.held, h.heldDig, h.members = held, placement.Digest(held), ms
	h.m.held.Set(float64(len(held)))
	h.m.placeMembers.Set(float64(len(ms)))
	return gained, lost
}

// diffSorted counts what is in b and not in a (gained) and in a and not in
// b (lost), both ascending.
func diffSorted(a, b []int) (gained, lost int) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			lost++
			i++
		case i == len(a) || b[j] < a[i]:
			gained++
			j++
		default:
			i++
			j++
		}
	}
	return gained, lost
}

// state is what Info announces: the held shards, their digest and the
// members they were computed over.
func (h *holder) state() (held []int, digest string, members []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held, h.heldDig, h.members
}

// placementGroup picks, from the live members, the storage agents this one
// places shards with: those announcing mine's fingerprint, layout digest and
// replicas (self is always in). A storage agent of the same fingerprint
// that announces another layout or replica count (another --shard-size or
// --replicas, or a version without placement) computes its own placement,
// so counting it here could leave shards that neither side holds; it is
// returned in odd instead. Both lists are sorted.
func placementGroup(self string, mine membership.Meta, ms []membership.Member) (group, odd []string) {
	group = []string{self}
	for _, m := range ms {
		switch {
		case m.Name == self || m.Meta.Role != membership.RoleStorage || m.Meta.Fingerprint != mine.Fingerprint:
		case m.Meta.Layout == mine.Layout && m.Meta.Replicas == mine.Replicas && m.Meta.Shards == mine.Shards:
			group = append(group, m.Name)
		default:
			odd = append(odd, m.Name)
		}
	}
	slices.Sort(group)
	slices.Sort(odd)
	return group, odd
}

// placer recomputes the agent's held shards on membership changes and
// re-announces their digest. One goroutine runs it.
type placer struct {
	h    *holder
	node *membership.Node
	meta membership.Meta // announced; Held is updated here
	log  zerolog.Logger
	odd  []string // the peers last warned about
}

// run recomputes at once, then on every membership change, until ctx ends.
func (p *placer) run(ctx context.Context) {
	p.rebalance()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.node.Changes():
			p.rebalance()
		}
	}
}

// rebalance recomputes the held shards from the current members, logs a
// change and announces the new held digest.
func (p *placer) rebalance() {
	group, odd := placementGroup(p.h.self, p.meta, p.node.Members())
	if !slices.Equal(odd, p.odd) {
		p.odd = odd
		if len(odd) > 0 {
			p.log.Warn().Strs("peers", odd).Int("replicas", p.meta.Replicas).Int("shards", p.meta.Shards).Str("layout", p.meta.Layout).
				Msg("storage agents of this dataset announce another layout or replica count (--shard-size, --replicas, or an agent without placement): placing shards without them")
		}
	}
	gained, lost := p.h.update(group)
	held, digest, members := p.h.state()
	if gained+lost > 0 {
		p.log.Info().Int("held", len(held)).Int("shards", p.h.layout.Len()).Int("gained", gained).Int("lost", lost).
			Strs("members", members).Int("replicas", p.h.replicas).Msg("held shards changed")
	}
	if digest == p.meta.Held {
		return
	}
	p.meta.Held = digest
	// NB: UpdateMeta waits up to a few seconds for the broadcast; on a
	// timeout the new meta still spreads with the next push-pull.
	if err := p.node.UpdateMeta(p.meta); err != nil {
		p.log.Warn().Err(err).Msg("announcing the held shards")
	}
}
