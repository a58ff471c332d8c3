package ops

import "math/bits"

// SeedFor derives the seed of op j on sample i in epoch e of a run. Every
// random draw of an op comes from a generator seeded this way, never from
// worker or goroutine state, so a sample's output does not depend on where
// or when it is processed.
func SeedFor(run, epoch, sample uint64, op int) uint64 {
	h := splitmix(run ^ 0x5350484f4e)
	h = splitmix(h ^ epoch)
	h = splitmix(h ^ sample)
	h = splitmix(h ^ uint64(op))
	return h
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Rand is a small, fully specified generator (xoshiro256**). Its output
// depends only on its seed, on every platform and Go version.
type Rand struct {
	s [4]uint64
}

// NewRand returns a generator seeded with seed.
func NewRand(seed uint64) *Rand {
	r := &Rand{}
	r.Seed(seed)
	return r
}

// Seed resets the generator's state from seed.
func (r *Rand) Seed(seed uint64) {
	for i := range r.s {
		seed += 0x9e3779b97f4a7c15
		r.s[i] = splitmix(seed)
	}
}

// Uint64 returns 64 uniformly random bits.
func (r *Rand) Uint64() uint64 {
	s := &r.s
	result := rotl(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = rotl(s[3], 45)
	return result
}

func rotl(x uint64, k uint) uint64 { return (x << k) | (x >> (64 - k)) }

// Float64 returns a uniform float in [0, 1) with 53 random bits.
func (r *Rand) Float64() float64 {
	return float64(r.Uint64()>>11) * (1.0 / (1 << 53))
}

// Uniform returns a uniform float in [lo, hi).
func (r *Rand) Uniform(lo, hi float64) float64 {
	return lo + (hi-lo)*r.Float64()
}

// Intn returns a uniform integer in [0, n). n must be positive. It uses
// Lemire's multiply-and-reject method, so there is no modulo bias.
func (r *Rand) Intn(n int) int {
	if n <= 0 {
		panic("ops: Intn with non-positive n")
	}
	bound := uint64(n)
	hi, lo := bits.Mul64(r.Uint64(), bound)
	if lo < bound {
		thresh := -bound % bound
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), bound)
		}
	}
	return int(hi)
}
