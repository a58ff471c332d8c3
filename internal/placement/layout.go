package placement

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"unicode/utf8"
)

// MaxShards bounds the shards of a layout: a storage agent refuses to serve
// a dataset that would have more, and [LayoutFromRanges] refuses a longer
// list from outside. A million shards of 1024 samples is a billion samples.
const MaxShards = 1 << 20

// MaxNameBytes bounds a shard's name: a tar file name (at most 255 bytes on
// Linux) shown safely quoted takes at most 4*255+2 bytes.
const MaxNameBytes = 1024

// DefaultShardSize is the samples per shard of a folder of images when the
// storage agent's --shard-size is not given.
const DefaultShardSize = 1024

// Errors of layouts. Each comes wrapped with the shard and the values at
// fault.
var (
	// ErrTooManyShards: more than MaxShards shards.
	ErrTooManyShards = errors.New("placement: too many shards")
	// ErrShardSize: a shard size of zero for a non-empty catalog.
	ErrShardSize = errors.New("placement: bad shard size")
	// ErrNoShards: no shards for a non-empty catalog. An InfoResponse
	// without a layout comes from a storage agent that predates placement,
	// which holds every sample.
	ErrNoShards = errors.New("placement: no shards")
	// ErrGap: a shard starts after the previous one ends (the first after
	// id 0).
	ErrGap = errors.New("placement: gap between shards")
	// ErrOverlap: a shard starts before the previous one ends.
	ErrOverlap = errors.New("placement: overlapping shards")
	// ErrEmptyShard: a shard of no samples.
	ErrEmptyShard = errors.New("placement: empty shard")
	// ErrTotal: the shards end before or after the catalog does.
	ErrTotal = errors.New("placement: shards do not cover the catalog")
	// ErrShardName: a shard name that is empty, not UTF-8 or longer than
	// MaxNameBytes.
	ErrShardName = errors.New("placement: bad shard name")
)

// Range is one shard: the sample ids [First, First+Count) and a name for
// logs and reports (the tar file's, or "ids-<first>-<last>").
type Range struct {
	First uint64
	Count uint64
	Name  string
}

// Last is the shard's last sample id; Count must not be zero.
func (r Range) Last() uint64 { return r.First + r.Count - 1 }

// RangeName is the name of the id range [first, first+count): "ids-<first>-<last>".
// count must not be zero.
func RangeName(first, count uint64) string {
	return "ids-" + strconv.FormatUint(first, 10) + "-" + strconv.FormatUint(first+count-1, 10)
}

// Layout is a catalog split into shards numbered 0..Len()-1 in id order:
// contiguous from id 0, non-empty, covering every id below Total once. The
// zero Layout is the layout of an empty catalog. A Layout is immutable and
// safe for concurrent use.
type Layout struct {
	total  uint64
	shards []Range
}

// Uniform splits a catalog of total samples into id ranges of size samples,
// the last one shorter when size does not divide total. It fails with
// ErrShardSize when size is zero (and total is not) and with
// ErrTooManyShards past MaxShards.
func Uniform(total, size uint64) (Layout, error) {
	if total == 0 {
		return Layout{}, nil
	}
	if size == 0 {
		return Layout{}, fmt.Errorf("%w: 0 samples per shard", ErrShardSize)
	}
	n := total / size
	if total%size != 0 {
		n++
	}
	if n > MaxShards {
		return Layout{}, fmt.Errorf("%w: %d samples in shards of %d make %d shards, at most %d: use larger shards",
			ErrTooManyShards, total, size, n, MaxShards)
	}
	shards := make([]Range, 0, n)
	// NB: by index, not first += size, which can wrap past 2^64-1.
	for i := range n {
		first := i * size
		count := min(size, total-first)
		shards = append(shards, Range{First: first, Count: count, Name: RangeName(first, count)})
	}
	return Layout{total: total, shards: shards}, nil
}

// LayoutFromRanges checks ranges against a catalog of total samples and
// returns their layout. It is the decoder for layouts from outside (a
// storage agent's InfoResponse): it fails, never panics, on any list that is
// not a layout, with ErrTooManyShards (past MaxShards, checked first),
// ErrNoShards (none for total > 0), ErrShardName, ErrEmptyShard, ErrGap,
// ErrOverlap or ErrTotal, wrapped with the shard at fault. ranges is copied.
func LayoutFromRanges(total uint64, ranges []Range) (Layout, error) {
	if len(ranges) > MaxShards {
		return Layout{}, fmt.Errorf("%w: %d, at most %d", ErrTooManyShards, len(ranges), MaxShards)
	}
	if len(ranges) == 0 {
		if total == 0 {
			return Layout{}, nil
		}
		return Layout{}, fmt.Errorf("%w: for %d samples", ErrNoShards, total)
	}
	next := uint64(0)
	for i, r := range ranges {
		if err := checkName(r.Name); err != nil {
			return Layout{}, fmt.Errorf("shard %d: %w", i, err)
		}
		switch {
		case r.Count == 0:
			return Layout{}, fmt.Errorf("%w: shard %d (%q) at id %d", ErrEmptyShard, i, r.Name, r.First)
		case r.First > next:
			return Layout{}, fmt.Errorf("%w: shard %d (%q) starts at id %d, the previous ends before %d", ErrGap, i, r.Name, r.First, next)
		case r.First < next:
			return Layout{}, fmt.Errorf("%w: shard %d (%q) starts at id %d, the previous ends before %d", ErrOverlap, i, r.Name, r.First, next)
		case r.Count > total-next: // next <= total holds here
			return Layout{}, fmt.Errorf("%w: shard %d (%q) of %d samples at id %d runs past the %d samples",
				ErrTotal, i, r.Name, r.Count, r.First, total)
		}
		next += r.Count
	}
	if next != total {
		return Layout{}, fmt.Errorf("%w: %d shards end at id %d, the catalog holds %d samples", ErrTotal, len(ranges), next, total)
	}
	return Layout{total: total, shards: append([]Range(nil), ranges...)}, nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrShardName)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrShardName, len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not UTF-8", ErrShardName, name)
	}
	return nil
}

// Len is the number of shards.
func (l Layout) Len() int { return len(l.shards) }

// Total is the number of samples.
func (l Layout) Total() uint64 { return l.total }

// Shard is shard i; i must be below Len.
func (l Layout) Shard(i int) Range { return l.shards[i] }

// Ranges returns a copy of the shards in order.
func (l Layout) Ranges() []Range { return append([]Range(nil), l.shards...) }

// ShardOf is the shard that holds sample id, found by binary search; false
// when id is not below Total.
func (l Layout) ShardOf(id uint64) (int, bool) {
	if id >= l.total {
		return 0, false
	}
	// The first shard that starts after id, minus one.
	i := sort.Search(len(l.shards), func(i int) bool { return l.shards[i].First > id })
	return i - 1, true
}

// Digest identifies the layout in 16 hex digits: the first 8 bytes of
// SHA-256 over "sophon-layout 1\n", the total as 8 bytes big-endian, and per
// shard its first id and count (8 bytes big-endian each) and its name (its
// length as 4 bytes big-endian, then its bytes). Two storage agents place
// shards alike only when their layouts' digests are equal.
func (l Layout) Digest() string {
	h := sha256.New()
	h.Write([]byte("sophon-layout 1\n"))
	var b [8 + 8 + 4]byte
	binary.BigEndian.PutUint64(b[:8], l.total)
	h.Write(b[:8])
	for _, r := range l.shards {
		binary.BigEndian.PutUint64(b[0:], r.First)
		binary.BigEndian.PutUint64(b[8:], r.Count)
		binary.BigEndian.PutUint32(b[16:], uint32(len(r.Name)))
		h.Write(b[:])
		h.Write([]byte(r.Name))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
