// Package bucket holds the classes of samples the cluster bound's bucketed
// LP prices (package relax, for policy's Bound): buckets of samples that share a
// compute node, a replica set and a class the caller chooses, with each
// bucket's per-option sums of its members' raw quantities (payload bytes,
// storage ns, compute ns), and the quantile levels classes are made of. It
// knows nothing of profiles or clusters: the caller computes each sample's
// options and key. It is pure arithmetic: no I/O, goroutines or clock.
package bucket

import (
	"math"
	"slices"
)

// Buckets are classes of samples: bucket b's members share compute node
// Node[b] and replica set Set[b] (the caller's indexes) and whatever else
// the caller keyed them by. Tot holds, per bucket and option, the sums of
// its members' raw quantities: exact loads for any plan that gives every
// member of a bucket the same option and replica.
type Buckets struct {
	N     int
	Nopt  int
	Node  []int32
	Set   []int32
	Count []int32
	Tot   [][3]float64 // N*Nopt, until Prune packs it into OptTot
	Of    []int32      // each sample's bucket
	// Opts lists, per bucket, the options worth pricing (Opts[OptAt[b]:
	// OptAt[b+1]]): those with data that no other option beats or equals
	// on bytes, storage and compute at once, which no prices could make
	// the strictly cheapest; OptTot holds their totals, packed, so that
	// pricing streams through less memory.
	OptAt  []int32
	Opts   []uint8
	OptTot [][3]float64
}

// New returns no buckets yet of nopt options each, for samples samples,
// with room for totCap option totals.
func New(nopt, samples, totCap int) *Buckets {
	return &Buckets{Nopt: nopt, Of: make([]int32, samples), Tot: make([][3]float64, 0, totCap)}
}

// Add appends an empty bucket on compute node node and replica set set,
// and returns its index.
func (bk *Buckets) Add(node, set int32) int32 {
	bk.Node = append(bk.Node, node)
	bk.Set = append(bk.Set, set)
	bk.Count = append(bk.Count, 0)
	bk.Tot = append(bk.Tot, make([][3]float64, bk.Nopt)...)
	bk.N++
	return int32(bk.N - 1)
}

// Put makes sample i a member of bucket b and adds its options' raw
// quantities opts (Nopt of them; +Inf where it has no data) to b's totals,
// in sample order, as the bound's sums are defined.
func (bk *Buckets) Put(i int, b int32, opts [][3]float64) {
	bk.Of[i] = b
	bk.Count[b]++
	t := bk.Tot[int(b)*bk.Nopt : int(b+1)*bk.Nopt]
	for o, q := range opts {
		t[o][0] += q[0]
		t[o][1] += q[1]
		t[o][2] += q[2]
	}
}

// Prune fills Opts and packs their totals into OptTot, in place of Tot
// (which it consumes).
func (bk *Buckets) Prune() {
	bk.OptAt = make([]int32, bk.N+1)
	tot := make([][3]float64, bk.Nopt)
	k := 0
	for b := range bk.N {
		copy(tot, bk.Tot[b*bk.Nopt:(b+1)*bk.Nopt])
		for o, q := range tot {
			if math.IsInf(q[0], 1) {
				continue
			}
			dominated := false
			for o2, q2 := range tot {
				if o2 != o && q2[0] <= q[0] && q2[1] <= q[1] && q2[2] <= q[2] && (q2 != q || o2 < o) {
					dominated = true
					break
				}
			}
			if !dominated {
				bk.Opts = append(bk.Opts, uint8(o))
				bk.Tot[k] = q
				k++
			}
		}
		bk.OptAt[b+1] = int32(k)
	}
	bk.OptTot, bk.Tot = bk.Tot[:k], nil
}

// Index maps keys in [0, keys) to buckets: a dense table up to 1<<22 keys,
// a map beyond.
type Index struct {
	dense  []int32
	sparse map[int]int32
}

// NewIndex returns an empty index of keys keys.
func NewIndex(keys int) *Index {
	if keys > 1<<22 {
		return &Index{sparse: map[int]int32{}}
	}
	dense := make([]int32, keys)
	for k := range dense {
		dense[k] = -1
	}
	return &Index{dense: dense}
}

// Get returns key's bucket, if it has one.
func (x *Index) Get(key int) (int32, bool) {
	if x.dense != nil {
		return x.dense[key], x.dense[key] >= 0
	}
	b, ok := x.sparse[key]
	return b, ok
}

// Put gives key the bucket b.
func (x *Index) Put(key int, b int32) {
	if x.dense != nil {
		x.dense[key] = b
	} else {
		x.sparse[key] = b
	}
}

// Levels returns the n-1 cut points of xs' quantiles (xs is sorted in
// place).
func Levels(xs []float64, n int) []float64 {
	slices.Sort(xs)
	cuts := make([]float64, n-1)
	for k := range cuts {
		if len(xs) > 0 {
			cuts[k] = xs[(k+1)*len(xs)/n]
		}
	}
	return cuts
}

// Level is the number of cut points below x.
func Level(x float64, cuts []float64) int {
	l := 0
	for l < len(cuts) && x > cuts[l] {
		l++
	}
	return l
}
