package placement

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
)

// DefaultReplicas is how many storage agents hold each shard when the
// storage agent's --replicas is not given.
const DefaultReplicas = 2

// MaxReplicas bounds a replica count a storage agent accepts and announces.
const MaxReplicas = 1024

// ErrHeld: a held-shard list from outside is not ascending, repeats a shard
// or names one past the layout.
var ErrHeld = errors.New("placement: bad held shards")

// Weight is member's rendezvous weight for shard: the first 8 bytes,
// big-endian, of SHA-256 over the shard index as 8 bytes big-endian (a
// negative index as its two's complement) followed by the member name's
// bytes. A shard's owners are its members of highest weight.
func Weight(shard int, member string) uint64 {
	var buf [64]byte
	b := binary.BigEndian.AppendUint64(buf[:0], uint64(shard))
	b = append(b, member...)
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// ranked is a member and its weight for one shard.
type ranked struct {
	w    uint64
	name string
}

// before orders by weight, highest first, ties (2^-64 apart) by name.
func before(a, b ranked) int {
	if c := cmp.Compare(b.w, a.w); c != 0 {
		return c
	}
	return cmp.Compare(a.name, b.name)
}

// distinct returns members sorted, each name once.
func distinct(members []string) []string {
	ms := slices.Clone(members)
	slices.Sort(ms)
	return slices.Compact(ms)
}

// Owners returns the members that hold shard, highest ranked first: the
// min(r, n) of the n distinct members with the highest Weight (ties broken
// by name), or all n, ranked, when r <= 0 or r >= n. A name listed twice
// counts once. It is deterministic: the same arguments give the same answer
// on every machine, whatever the order of members. A negative shard has no
// owners.
func Owners(shard int, members []string, r int) []string {
	if shard < 0 {
		return nil
	}
	ms := distinct(members)
	rs := make([]ranked, len(ms))
	for i, m := range ms {
		rs[i] = ranked{Weight(shard, m), m}
	}
	slices.SortFunc(rs, before)
	if r > 0 && r < len(rs) {
		rs = rs[:r]
	}
	out := make([]string, len(rs))
	for i, x := range rs {
		out[i] = x.name
	}
	return out
}

// Held returns, ascending, the shards among 0..shards-1 whose Owners
// (members, r) include self: every shard when r <= 0 or r >= the number of
// distinct members, none when self is not a member. It costs one Weight per
// shard and member.
func Held(self string, members []string, shards, r int) []int {
	ms := distinct(members)
	if _, ok := slices.BinarySearch(ms, self); !ok || shards <= 0 {
		return nil
	}
	held := make([]int, 0, shards)
	if r <= 0 || r >= len(ms) {
		for s := range shards {
			held = append(held, s)
		}
		return held
	}
	for s := range shards {
		me := ranked{Weight(s, self), self}
		above := 0
		for _, m := range ms {
			if m != self && before(ranked{Weight(s, m), m}, me) < 0 {
				if above++; above == r {
					break
				}
			}
		}
		if above < r {
			held = append(held, s)
		}
	}
	return held
}

// Assign returns every distinct member's Held shards at once, keyed by name;
// a member that holds none has an empty list. It ranks each shard's members
// once, so it costs what one Held does times log n, not times n.
func Assign(members []string, shards, r int) map[string][]int {
	ms := distinct(members)
	out := make(map[string][]int, len(ms))
	for _, m := range ms {
		out[m] = []int{}
	}
	if len(ms) == 0 || shards <= 0 {
		return out
	}
	keep := len(ms)
	if r > 0 && r < keep {
		keep = r
	}
	rs := make([]ranked, len(ms))
	for s := range shards {
		for i, m := range ms {
			rs[i] = ranked{Weight(s, m), m}
		}
		if keep < len(ms) {
			slices.SortFunc(rs, before)
		}
		for _, x := range rs[:keep] {
			out[x.name] = append(out[x.name], s)
		}
	}
	return out
}

// Digest identifies a held-shard list in 16 hex digits: the first 8 bytes of
// SHA-256 over each shard index, in the list's order, as 4 bytes big-endian
// (its low 32 bits). A storage agent announces the digest of its held shards
// in gossip and the list itself in Info, so a compute agent can tell whether
// the Info it read is the placement gossip now announces.
func Digest[S ~int | ~uint32](held []S) string {
	h := sha256.New()
	var b [4]byte
	for _, s := range held {
		binary.BigEndian.PutUint32(b[:], uint32(s))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// CheckHeld checks a held-shard list from outside (InfoResponse.held_shards)
// against a layout of shards shards: strictly ascending, each below shards.
// Its error wraps ErrHeld and names the first entry at fault.
func CheckHeld(held []uint32, shards int) error {
	if len(held) > shards {
		return fmt.Errorf("%w: %d shards held of %d", ErrHeld, len(held), shards)
	}
	for i, s := range held {
		if int64(s) >= int64(shards) {
			return fmt.Errorf("%w: entry %d is shard %d, the layout has %d", ErrHeld, i, s, shards)
		}
		if i > 0 && s <= held[i-1] {
			return fmt.Errorf("%w: entry %d (shard %d) does not follow entry %d (shard %d)", ErrHeld, i, s, i-1, held[i-1])
		}
	}
	return nil
}
