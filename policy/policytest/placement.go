package policytest

// ReplicaSet returns, in buf[:0], the r of nodes storage nodes (r <= nodes)
// that hold sample i under rendezvous hashing with seed: the nodes with the
// r highest scores hash(seed, i, node), highest first. It is deterministic
// and spreads every pair of nodes evenly.
func ReplicaSet(buf []int16, i uint64, nodes, r int, seed uint64) []int16 {
	buf = buf[:0]
	var scores [8]uint64
	sc := scores[:0]
	for j := range nodes {
		s := mix64(seed ^ mix64(i*0x9e3779b97f4a7c15+uint64(j)+1))
		// Insert (s, j) keeping the r best, highest first.
		k := len(buf)
		if k < r {
			buf = append(buf, 0)
			sc = append(sc, 0)
		} else if s <= sc[k-1] {
			continue
		} else {
			k--
		}
		for k > 0 && sc[k-1] < s {
			sc[k], buf[k] = sc[k-1], buf[k-1]
			k--
		}
		sc[k], buf[k] = s, int16(j)
	}
	return buf
}

// mix64 is SplitMix64's finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ (x >> 31)
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
