// Package cacheplan is the compute-side cache in the planner's model
// (PRESTO's materialise-or-recompute trade-off): where a
// profile's samples are kept (the cache split, SplitOf), what a resident
// sample costs (Entry, FinishNS), the profile in which resident samples
// cost what reading them from the cache costs (Rewrite, which lets every
// policy plan and predict with a cache unchanged) and the one in which
// they are fetched at the cache split, as the first epoch fetches them
// (Pin), the fractional
// knapsack of residency under a byte budget at given prices (Knapsack),
// an LRU cache's steady-state hit ratio (LRUHitRatio) and budgets as
// users write them (ParseBudget). Package policy chooses residency with
// it; it is pure arithmetic: no I/O, goroutines or clock.
package cacheplan

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sophon-dl/sophon/internal/bytesize"
	"github.com/sophon-dl/sophon/profiler"
)

// ReadNSPerByte is the compute CPU a resident sample costs per entry
// byte to read back from the cache and check (a copy from the page cache
// and a checksum, about 1 GB/s), on top of finishing its pipeline from
// the cache split.
const ReadNSPerByte = 1.0

// Unreachable is the payload, in bytes, of every split but 0 of a resident
// sample in a Rewrite profile: so large that no plan sends it, since a
// resident sample is read locally and never fetched.
const Unreachable = int64(1) << 40

// randomOps are the ops that draw from the per-(epoch, sample) generator;
// the names are ops.Pipeline.CacheSplit's op types'.
var randomOps = []string{"random_resized_crop", "decode_random_resized_crop", "random_horizontal_flip"}

// SplitOf is the cache split of a pipeline given its op names, as
// ops.Pipeline.CacheSplit gives it for the pipeline itself: 0 (the
// encoded file) when any op is random, else len(names) (the finished
// output, which depends on neither seed nor epoch).
func SplitOf(names []string) int {
	for _, n := range names {
		if slices.Contains(randomOps, n) {
			return 0
		}
	}
	return len(names)
}

// Entry is the bytes sample s takes in the cache at split k: its size
// after ops [0:k] (the file itself at 0).
func Entry(s *profiler.SampleProfile, k int) float64 { return float64(s.Bytes[k]) }

// FinishNS is the compute ns of serving resident sample s from the cache
// at split k: ops [k:n] and reading its entry back (ReadNSPerByte).
func FinishNS(s *profiler.SampleProfile, k int) float64 {
	ns := readNS(s, k)
	for _, x := range s.OpNS[k:] {
		ns += float64(x)
	}
	return ns
}

// readNS is the whole ns of reading sample s's entry at split k back.
func readNS(s *profiler.SampleProfile, k int) float64 {
	return math.Round(Entry(s, k) * ReadNSPerByte)
}

// Rewrite returns p with every sample i where cached[i] replaced by its
// cost when resident at split k: at split 0 no payload and no storage
// CPU, and FinishNS compute ns (its ops before k cost nothing, the read
// is added to its last op); every other split sends Unreachable bytes,
// and it has no compressed or cut form. Planning and predicting on the
// result is planning and predicting with those samples resident. The
// other samples are p's (shared, not copied).
func Rewrite(p *profiler.Profile, cached []bool, k int) *profiler.Profile {
	q := *p
	q.Samples = slices.Clone(p.Samples)
	n := p.N()
	for i := range q.Samples {
		if i >= len(cached) || !cached[i] || n == 0 {
			continue
		}
		s := &q.Samples[i]
		read := int64(readNS(s, k))
		r := profiler.SampleProfile{ID: s.ID, Raw: s.Raw, Bytes: make([]int64, n+1), OpNS: make([]int64, n)}
		for j := 1; j <= n; j++ {
			r.Bytes[j] = Unreachable
		}
		copy(r.OpNS[k:], s.OpNS[k:])
		r.OpNS[n-1] += read
		*s = r
	}
	return &q
}

// density is item i's saving per byte (+Inf for an empty entry).
// byDensity orders items by density, highest first (slices.SortStableFunc
// keeps equal ones in index order).
func byDensity(save, entry []float64) func(a, b int) int {
	return func(a, b int) int { return cmp.Compare(density(save, entry, b), density(save, entry, a)) }
}

func density(save, entry []float64, i int) float64 {
	if entry[i] <= 0 {
		return math.Inf(1)
	}
	return save[i] / entry[i]
}

// Pin returns p with every sample i where pinned[i] limited to split k:
// every other split sends Unreachable bytes, and it has no compressed or
// cut form. Planning on the result plans the other samples around those
// fetched at k, as the first epoch fetches the samples it fills the cache
// with. The other samples are p's (shared, not copied).
func Pin(p *profiler.Profile, pinned []bool, k int) *profiler.Profile {
	q := *p
	q.Samples = slices.Clone(p.Samples)
	for i := range q.Samples {
		if i >= len(pinned) || !pinned[i] {
			continue
		}
		s := &q.Samples[i]
		r := profiler.SampleProfile{ID: s.ID, Raw: s.Raw, Bytes: make([]int64, len(s.Bytes)), OpNS: s.OpNS}
		for j := range r.Bytes {
			r.Bytes[j] = Unreachable
		}
		r.Bytes[k] = s.Bytes[k]
		*s = r
	}
	return &q
}

// Knapsack is the fractional knapsack of residency: item i saves save[i]
// (priced seconds: what its best fetched option costs less what it costs
// resident) and takes entry[i] bytes of the budget. Items with a positive
// saving are taken whole by decreasing saving per byte (ties by position)
// while they fit; the first that does not fit is taken in part, to fill
// the budget exactly. take[i] is the share of item i taken, in [0, 1];
// at most one is fractional. It is the minimiser of the Lagrangian of the
// capacity constraint at the price of that last item's saving per byte
// (zero when every item fits), which makes the cache bound's dual exact.
func Knapsack(save, entry []float64, budget float64) []float64 {
	take := make([]float64, len(save))
	var idx []int
	for i, s := range save {
		if s > 0 {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, byDensity(save, entry))
	left := max(budget, 0)
	for _, i := range idx {
		if entry[i] <= left {
			take[i] = 1
			left -= entry[i]
			continue
		}
		take[i] = left / entry[i]
		break
	}
	return take
}

// Whole rounds a Knapsack down to whole items (the fractional one left
// out) and fills what its fraction leaves with the next items, in the same
// order of saving per byte, that still fit whole.
func Whole(save, entry []float64, budget float64) []bool {
	take := Knapsack(save, entry, budget)
	in := make([]bool, len(take))
	for i, t := range take {
		in[i] = t == 1
	}
	return fill(in, save, entry, budget)
}

// Alternatives are the knapsack's two other roundings, each taken whole
// first and then filled as Whole fills (nil where there is none): the item
// Knapsack takes in part, and the item of the largest saving that fits
// alone. With Whole they make the classic greedy that is never worse than
// half the best whole residency at the same prices; which is best for the
// epoch only a plan can tell.
func Alternatives(save, entry []float64, budget float64) [][]bool {
	var out [][]bool
	frac, single := -1, -1
	for i, t := range Knapsack(save, entry, budget) {
		if t > 0 && t < 1 {
			frac = i
		}
		if save[i] > 0 && entry[i] <= budget && (single < 0 || save[i] > save[single]) {
			single = i
		}
	}
	for _, i := range []int{frac, single} {
		if i >= 0 && entry[i] <= budget {
			in := make([]bool, len(save))
			in[i] = true
			out = append(out, fill(in, save, entry, budget))
		}
	}
	return out
}

// fill adds to in, by decreasing saving per byte, every item with a
// positive saving that still fits whole beside those in it.
func fill(in []bool, save, entry []float64, budget float64) []bool {
	left := max(budget, 0)
	var rest []int
	for i := range in {
		if in[i] {
			left -= entry[i]
		} else if save[i] > 0 {
			rest = append(rest, i)
		}
	}
	slices.SortStableFunc(rest, byDensity(save, entry))
	for _, i := range rest {
		if entry[i] <= left {
			in[i] = true
			left -= entry[i]
		}
	}
	return in
}

// ErrBudget is wrapped by ParseBudget's errors.
var ErrBudget = errors.New("cacheplan: bad cache budget")

// ParseBudget reads a cache budget: a byte count with an optional unit,
// read by bytesize.Parse like every size flag (64MiB, 2G and 2GiB binary,
// 1.5GB decimal, 4096: bytesize.Units), or a percentage of total (25%),
// the dataset's bytes.
func ParseBudget(s string, total float64) (float64, error) {
	t := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 || v > 100 || math.IsNaN(v) {
			return 0, fmt.Errorf("%w %q: a percentage in [0, 100]", ErrBudget, s)
		}
		return math.Floor(total * v / 100), nil
	}
	n, err := bytesize.Parse(t)
	if err != nil {
		return 0, fmt.Errorf("%w %q: bytes with an optional unit (64MiB, 2GB) or a percentage (25%%): %w", ErrBudget, s, err)
	}
	return float64(n), nil
}
