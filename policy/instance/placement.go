package instance

import "github.com/sophon-dl/sophon/internal/placement"

// ReplicaSet returns, in buf[:0], the r storage nodes of names (r <=
// len(names)) that hold sample i under the agents' rendezvous hashing
// (internal/placement.Weight), sample i of seed being the shard
// seed<<32 | i: the r nodes of highest weight, highest first, ties by
// name, as placement.Owners ranks them, as indices into names.
func ReplicaSet(buf []int16, i uint64, names []string, r int, seed uint64) []int16 {
	buf = buf[:0]
	var scores [8]uint64
	sc := scores[:0]
	shard := int(seed<<32 | i)
	for j, name := range names {
		s := placement.Weight(shard, name)
		// Insert (s, j) keeping the r best, highest first.
		k := len(buf)
		if k < r {
			buf = append(buf, 0)
			sc = append(sc, 0)
		} else if !above(s, name, sc[k-1], names[buf[k-1]]) {
			continue
		} else {
			k--
		}
		for k > 0 && above(s, name, sc[k-1], names[buf[k-1]]) {
			sc[k], buf[k] = sc[k-1], buf[k-1]
			k--
		}
		sc[k], buf[k] = s, int16(j)
	}
	return buf
}

// above reports whether weight s of node name ranks above weight t of
// node other: the higher weight, ties by name.
func above(s uint64, name string, t uint64, other string) bool {
	return s > t || s == t && name < other
}

// Ranks returns n samples' ranks dealt in turn over ranks ranks (sample i
// to rank i mod ranks), as DistributedSampler deals a shuffled dataset.
func Ranks(n, ranks int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i % ranks)
	}
	return out
}
