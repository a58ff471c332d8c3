package computeagent

import "github.com/sophon-dl/sophon/ops"

// OrderStream is the op index under which the epoch's permutation draws
// from ops.SeedFor. Real ops have indices >= 0, so the permutation never
// shares a generator with a pipeline op.
const OrderStream = -1

// Order returns the samples of rank's shard of a catalog of total samples
// (the ids i with i % world == rank, ascending) in the permutation of
// (seed, epoch): a Fisher-Yates shuffle driven by
// ops.NewRand(ops.SeedFor(seed, epoch, 0, OrderStream)). Each sample of the
// shard appears exactly once; the result is the same on every platform and
// differs from epoch to epoch.
func Order(seed, epoch uint64, rank, world int, total uint64) []uint64 {
	if world < 1 || rank < 0 || rank >= world {
		return nil
	}
	w, r := uint64(world), uint64(rank)
	var n uint64
	if total > r {
		n = (total - r + w - 1) / w
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = r + uint64(i)*w
	}
	rng := ops.NewRand(ops.SeedFor(seed, epoch, 0, OrderStream))
	for i := len(out) - 1; i > 0; i-- {
		j := rng.Intn(i + 1)
		out[i], out[j] = out[j], out[i]
	}
	return out
}
