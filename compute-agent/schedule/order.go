package schedule

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

// RankOrder is rank's epoch order when every rank must yield the same
// number of batches of size batch (DDP hangs on uneven counts): Order's
// shard, then with dropLast cut to floor(floor(total/world)/batch)*batch
// samples (only full batches), else padded to ceil(total/world) by
// repeating the start of the rank's own order, as DistributedSampler pads.
// Index j of rank's order has the global position j*world + rank, unique
// within the epoch.
func RankOrder(seed, epoch uint64, rank, world int, total uint64, batch int, dropLast bool) []uint64 {
	if world < 1 || rank < 0 || rank >= world || batch < 1 || total == 0 {
		return nil
	}
	base := Order(seed, epoch, rank, world, total)
	if len(base) == 0 { // fewer samples than ranks: borrow, as DistributedSampler wraps around
		base = []uint64{uint64(rank) % total}
	}
	n := RankSamples(world, total, batch, dropLast)
	if n <= len(base) {
		return base[:n]
	}
	out := make([]uint64, n)
	copy(out, base)
	for i := len(base); i < n; i++ {
		out[i] = base[(i-len(base))%len(base)]
	}
	return out
}

// RankSamples is the length of every rank's RankOrder.
func RankSamples(world int, total uint64, batch int, dropLast bool) int {
	w := uint64(world)
	if dropLast {
		return int((total / w) / uint64(batch) * uint64(batch))
	}
	return int((total + w - 1) / w)
}

// RankBatches is the number of batches every rank yields per epoch.
func RankBatches(world int, total uint64, batch int, dropLast bool) int {
	n := RankSamples(world, total, batch, dropLast)
	return (n + batch - 1) / batch
}
