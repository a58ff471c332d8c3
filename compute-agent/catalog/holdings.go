package catalog

import (
	"errors"
	"fmt"

	shards "github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/internal/placement/wire"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// Holdings is what a storage agent's Info said about placement: the
// shards of the catalog it holds. A nil *Holdings holds every sample.
type Holdings struct {
	layout   shards.Layout
	held     []bool // by shard
	name     string // its placement (gossip) name
	replicas int
	// missing marks the shards the agent does not store (it runs from a
	// manifest with part of the files); nil: it stores every shard.
	missing []bool
	// shards is how many shards it holds; partial, whether that is fewer
	// than all (Holds checks the shard) or all (every sample).
	shards  int
	partial bool
}

// Announce takes the shards storage agent agent holds from its Info: a
// layout of the catalog cat and the held shards (checked, from outside).
// An agent that announces no layout holds every sample (nil Holdings).
func Announce(agent string, info *dataplanepb.InfoResponse, cat *Catalog) (*Holdings, error) {
	layout, held, err := wire.DecodePlacement(info)
	if errors.Is(err, shards.ErrNoShards) && len(info.GetLayout()) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", agent, err)
	}
	if layout.Total() != cat.Total {
		return nil, fmt.Errorf("%s: layout of %d samples, catalog of %d", agent, layout.Total(), cat.Total)
	}
	missing, err := wire.DecodeMissing(info, layout, held)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", agent, err)
	}
	h := &Holdings{layout: layout, held: make([]bool, layout.Len()), name: info.GetPlacementName(), replicas: int(info.GetReplicas())}
	for _, s := range held {
		h.held[s] = true
	}
	if len(missing) > 0 {
		h.missing = make([]bool, layout.Len())
		for _, s := range missing {
			h.missing[s] = true
		}
	}
	h.shards, h.partial = len(held), len(held) != layout.Len()
	return h, nil
}

// Holds reports whether the agent holds sample's shard.
func (h *Holdings) Holds(sample uint64) bool {
	if h == nil || !h.partial {
		return true
	}
	s, ok := h.layout.ShardOf(sample)
	return ok && h.held[s]
}

// HoldsFunc is Holds where the agent holds only some samples, nil where it
// holds every one (Place).
func (h *Holdings) HoldsFunc() func(sample uint64) bool {
	if h == nil || !h.partial {
		return nil
	}
	return h.Holds
}

// Shards is how many shards the agent holds (0 without a layout).
func (h *Holdings) Shards() int {
	if h == nil {
		return 0
	}
	return h.shards
}

// stores reports whether the agent has shard s's files.
func (h *Holdings) stores(s int) bool { return h.missing == nil || !h.missing[s] }

// Replace gives the shards that none of hs holds to the agents of hs that
// store them, by rendezvous hashing over those agents' names alone, as the
// storage agents themselves will once gossip has declared the missing
// holders dead: a storage agent that died (and is unreachable now) no
// longer leaves its shards unavailable for the epochs gossip takes to
// notice. Agents of a placement group have the same dataset (the same
// fingerprint), all of its files or, from a manifest, part of them (their
// missing shards); a shard that no reachable agent stores stays unplaced,
// and its samples unavailable. It does so only when every agent of hs
// announced the same layout and replica count under a name, and returns
// how many shards it placed.
func Replace(hs []*Holdings) int {
	if len(hs) == 0 || hs[0] == nil {
		return 0
	}
	first := hs[0]
	for _, h := range hs {
		if h == nil || h.name == "" || h.replicas != first.replicas || h.layout.Digest() != first.layout.Digest() {
			return 0
		}
	}
	byName := map[string]*Holdings{}
	for _, h := range hs {
		byName[h.name] = h
	}
	placed := 0
	for s := range first.layout.Len() {
		held := false
		for _, h := range hs {
			held = held || h.held[s]
		}
		if held {
			continue
		}
		storers := make([]string, 0, len(hs))
		for _, h := range hs {
			if h.stores(s) {
				storers = append(storers, h.name)
			}
		}
		if len(storers) == 0 {
			continue
		}
		for _, owner := range shards.Owners(s, storers, first.replicas) {
			h := byName[owner]
			h.held[s] = true
			h.shards++
			h.partial = true
		}
		placed++
	}
	return placed
}
