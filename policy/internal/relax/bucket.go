package relax

import (
	"math"
	"slices"

	"github.com/sophon-dl/sophon/policy/internal/bucket"
)

// Bucketing.
const (
	// BucketExact: problems of at most this many samples get one bucket
	// per sample, so the bucketed LP is the LP (Problem.ExactBuckets).
	BucketExact = 16384
	// bucketTarget is about how many buckets quantile bucketing makes
	// before refinement: each of the two features gets L levels, L*L
	// buckets per (compute node, replica set) pair present (times the
	// option families), L = sqrt(bucketTarget/pairs), 2 to maxLevels.
	bucketTarget, maxLevels = 49152, 64
	// quantileSample is how many samples, evenly spaced, set the levels.
	quantileSample = 8192
)

// Layout is how a sample's options are numbered: option o < CutOpt is
// split o/Stride, compressed when o%Stride == 1 (Stride is 2 where any
// sample has compression data); option CutOpt, where Cut, is the
// JPEG-domain cut.
type Layout struct {
	Stride, CutOpt int
	Cut            bool
}

// Buckets are bucket.Buckets of samples that share a compute node, a
// replica set (its members, in the order of the first set with them:
// bk.Set indexes Problem.Sets) and the options they have, and fall in
// the same quantiles of size and of cut shrink (or best-split shrink);
// refined buckets also share their cheapest column at given prices.
type Buckets = bucket.Buckets

// features are what bucketing classifies a sample by; sig says which
// option families it has (bit 0 compression, bit 1 the cut).
func (l Layout) features(buf []Raw) (size, shrink, cutr float64, sig int) {
	size = max(buf[0][0], 1)
	shrink = math.Inf(1)
	for o := l.Stride; o < l.CutOpt; o++ {
		if b := buf[o][0]; b < shrink {
			shrink = b
		}
	}
	shrink /= size
	if l.Stride == 2 && !math.IsInf(buf[1][0], 1) {
		sig |= 1
	}
	if l.Cut && !math.IsInf(buf[l.CutOpt][0], 1) {
		sig |= 2
		cutr = buf[l.CutOpt][0] / size
	}
	return size, shrink, cutr, sig
}

// node is sample i's compute node.
func (pb *Problem) node(i int) int32 { return pb.Node[pb.Rank[i]] }

// quantiles returns the levels per feature and the quantile cut points of
// the two features bucket classifies by, from evenly spaced samples. The
// second feature is the cut's shrink where the problem has cuts, else the
// best split's; each gets as many levels as keep the buckets near
// bucketTarget. buf is scratch of Nopt options.
func (pb *Problem) quantiles(buf []Raw) (lv int, szc, shc []float64) {
	n := pb.N
	step := max(1, n/quantileSample)
	var sz, sh []float64
	pairs := map[int64]bool{}
	for i := 0; i < n; i += step {
		pb.Options(i, buf)
		size, shrink, cutr, sig := pb.Layout.features(buf)
		sz = append(sz, size)
		if pb.Layout.Cut {
			if sig&2 != 0 {
				sh = append(sh, cutr)
			}
		} else {
			sh = append(sh, shrink)
		}
		pairs[int64(pb.node(i))<<32|int64(pb.Canon[pb.Set[i]])] = true
	}
	lv = int(math.Sqrt(float64(bucketTarget) / float64(len(pairs))))
	lv = min(max(lv, 2), maxLevels)
	return lv, bucket.Levels(sz, lv), bucket.Levels(sh, lv)
}

// Bucket classifies every sample and sums its options per bucket: one
// bucket per sample up to ExactBuckets samples, quantile buckets beyond.
func (pb *Problem) Bucket() *Buckets {
	n := pb.N
	buf := make([]Raw, pb.Nopt)
	bk := bucket.New(pb.Nopt, n, 0)
	newBucket := func(i int) int32 { return bk.Add(pb.node(i), pb.Canon[pb.Set[i]]) }
	if n <= pb.ExactBuckets {
		for i := range n {
			pb.Options(i, buf)
			bk.Put(i, newBucket(i), buf)
		}
		bk.Prune()
		return bk
	}
	lv, szc, shc := pb.quantiles(buf)
	classes := 4 * lv * lv
	index := bucket.NewIndex(pb.NC * len(pb.Sets) * classes)
	for i := range n {
		pb.Options(i, buf)
		size, shrink, cutr, sig := pb.Layout.features(buf)
		second := shrink
		if pb.Layout.Cut {
			second = cutr
		}
		class := (sig*lv+bucket.Level(size, szc))*lv + bucket.Level(second, shc)
		key := (int(pb.node(i))*len(pb.Sets)+int(pb.Canon[pb.Set[i]]))*classes + class
		b, ok := index.Get(key)
		if !ok {
			b = newBucket(i)
			index.Put(key, b)
		}
		bk.Put(i, b, buf)
	}
	bk.Prune()
	return bk
}

// refine splits every bucket by the column (replica and option) its
// members find cheapest at the weights w. The refined buckets' Lagrangian
// at w is then the exact one, and the search goes on from there: a bucket
// whose members disagree at the LP's prices is where bucketing cost the
// bound, and it is split exactly there. It returns the refined buckets,
// each one's parent and the exact Lagrangian dual value at w.
func (pb *Problem) refine(bk *Buckets, w []float64) (*Buckets, []int32, float64) {
	nopt, nc := bk.Nopt, pb.NC
	pr, unit := pb.PricesAt(w), pb.PricesAt(nil)
	buf := make([]Raw, nopt)
	fine := bucket.New(nopt, pb.N, 2*len(bk.OptAt)*nopt)
	var parent []int32
	var g float64
	index := map[uint64]int32{}
	for i := range pb.N {
		pb.Options(i, buf)
		b := bk.Of[i]
		c := int(bk.Node[b])
		best, bestU, bc := math.Inf(1), math.Inf(1), 0
		for jj, j := range pb.Sets[bk.Set[b]] {
			a, be, gc := pr.Alpha[int(j)*nc+c], pr.Beta[j], pr.Gamma[c]
			au, bu, gu := unit.Alpha[int(j)*nc+c], unit.Beta[j], unit.Gamma[c]
			for o, q := range buf {
				if math.IsInf(q[0], 1) {
					continue
				}
				v := a*q[0] + be*q[1] + gc*q[2]
				if v > best {
					continue
				}
				if u := au*q[0] + bu*q[1] + gu*q[2]; v < best || u < bestU {
					best, bestU, bc = v, u, jj*nopt+o
				}
			}
		}
		g += best
		key := uint64(b)<<16 | uint64(bc)
		f, ok := index[key]
		if !ok {
			f = fine.Add(bk.Node[b], bk.Set[b])
			index[key] = f
			parent = append(parent, b)
		}
		fine.Put(i, f, buf)
	}
	fine.Prune()
	return fine, parent, g
}

// CanonSets maps each replica set to the first set with the same members,
// in any order (Problem.Canon).
func CanonSets(sets [][]int16) []int32 {
	canon := make([]int32, len(sets))
	first := map[string]int32{}
	var key []byte
	for k, set := range sets {
		sorted := slices.Sorted(slices.Values(set))
		key = key[:0]
		for _, j := range sorted {
			key = append(key, byte(j), byte(uint16(j)>>8))
		}
		f, ok := first[string(key)]
		if !ok {
			f = int32(k)
			first[string(key)] = f
		}
		canon[k] = f
	}
	return canon
}
