package policy

import "fmt"

// Placement says, for every sample of a profile, which rank trains on it
// (hence which compute node it goes to) and which storage nodes hold a
// replica of it. It is the caller's: the planner never changes which rank
// a sample belongs to, only which replica serves it and where it is split.
//
// Replica sets are stored once each (Sets) and referred to per sample
// (Set), so 1.28 M samples over a few dozen distinct sets take 8 bytes a
// sample.
type Placement struct {
	// Rank holds each sample's rank, indexed as Profile.Samples; ranks are
	// numbered node by node in Cluster.Compute order.
	Rank []int32
	// Sets lists the distinct replica sets, each as indices into
	// Cluster.Storage without repeats. The order within a set is the order
	// RoundRobin takes the replicas in.
	Sets [][]int16
	// Set holds each sample's replica set, as an index into Sets.
	Set []int32
}

// NewPlacement builds a Placement of len(rank) samples: sample i trains on
// rank[i] (the slice is kept, not copied) and is held by the storage nodes
// replicas(i) returns (read before the next call, so the function may reuse
// its buffer). Identical sets, in the same order, are stored once. It fails
// with ErrPlacement for an empty set or one larger than MaxReplicas;
// everything else is checked against a cluster when planning.
func NewPlacement(rank []int32, replicas func(i int) []int16) (*Placement, error) {
	pl := &Placement{Rank: rank, Set: make([]int32, len(rank))}
	index := map[string]int32{}
	var key []byte
	for i := range rank {
		set := replicas(i)
		if len(set) == 0 || len(set) > MaxReplicas {
			return nil, clusterErr(ErrPlacement, fmt.Sprintf("replicas(%d)", i), "%d replicas, want 1 to %d", len(set), MaxReplicas)
		}
		key = key[:0]
		for _, j := range set {
			key = append(key, byte(j), byte(uint16(j)>>8))
		}
		// NB: a lookup with string(key) does not allocate; only a new set's
		// key is copied into the map.
		k, ok := index[string(key)]
		if !ok {
			k = int32(len(pl.Sets))
			pl.Sets = append(pl.Sets, append([]int16(nil), set...))
			index[string(key)] = k
		}
		pl.Set[i] = k
	}
	return pl, nil
}

// check validates pl against c and a profile of n samples.
func (pl *Placement) check(c *Cluster, n int) error {
	if pl == nil {
		return clusterErr(ErrPlacement, "placement", "nil")
	}
	if len(pl.Rank) != n || len(pl.Set) != n {
		return clusterErr(ErrPlacement, "placement", "%d ranks and %d sets for %d samples", len(pl.Rank), len(pl.Set), n)
	}
	ranks := int32(c.Ranks())
	for i, r := range pl.Rank {
		if r < 0 || r >= ranks {
			return clusterErr(ErrPlacement, fmt.Sprintf("rank[%d]", i), "%d, want 0 to %d", r, ranks-1)
		}
	}
	ns := len(c.Storage)
	seen := make([]int, ns)
	for k, set := range pl.Sets {
		if len(set) == 0 || len(set) > MaxReplicas {
			return clusterErr(ErrPlacement, fmt.Sprintf("sets[%d]", k), "%d replicas, want 1 to %d", len(set), MaxReplicas)
		}
		for _, j := range set {
			if j < 0 || int(j) >= ns {
				return clusterErr(ErrPlacement, fmt.Sprintf("sets[%d]", k), "storage node %d, want 0 to %d", j, ns-1)
			}
			if seen[j] == k+1 {
				return clusterErr(ErrPlacement, fmt.Sprintf("sets[%d]", k), "storage node %d twice", j)
			}
			seen[j] = k + 1
		}
	}
	for i, s := range pl.Set {
		if s < 0 || int(s) >= len(pl.Sets) {
			return clusterErr(ErrPlacement, fmt.Sprintf("set[%d]", i), "%d, want 0 to %d", s, len(pl.Sets)-1)
		}
	}
	return nil
}
