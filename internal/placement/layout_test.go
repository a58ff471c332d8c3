package placement

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestUniform(t *testing.T) {
	tests := []struct {
		total, size uint64
		want        []Range
	}{
		{10, 4, []Range{{0, 4, "ids-0-3"}, {4, 4, "ids-4-7"}, {8, 2, "ids-8-9"}}},
		{8, 4, []Range{{0, 4, "ids-0-3"}, {4, 4, "ids-4-7"}}},
		{3, 1024, []Range{{0, 3, "ids-0-2"}}},
		{1, 1, []Range{{0, 1, "ids-0-0"}}},
		{0, 4, nil},
		{0, 0, nil},
	}
	for _, tt := range tests {
		l, err := Uniform(tt.total, tt.size)
		if err != nil {
			t.Errorf("Uniform(%d, %d): %v", tt.total, tt.size, err)
			continue
		}
		if got := l.Ranges(); !reflect.DeepEqual(got, tt.want) && len(got)+len(tt.want) > 0 {
			t.Errorf("Uniform(%d, %d): got %v, want %v", tt.total, tt.size, got, tt.want)
		}
		if l.Len() != len(tt.want) || l.Total() != tt.total {
			t.Errorf("Uniform(%d, %d): Len %d Total %d, want %d, %d", tt.total, tt.size, l.Len(), l.Total(), len(tt.want), tt.total)
		}
	}
	if _, err := Uniform(10, 0); !errors.Is(err, ErrShardSize) {
		t.Errorf("Uniform(10, 0): got %v, want %v", err, ErrShardSize)
	}
	if _, err := Uniform(MaxShards+1, 1); !errors.Is(err, ErrTooManyShards) {
		t.Errorf("Uniform(MaxShards+1, 1): got %v, want %v", err, ErrTooManyShards)
	}
	if l, err := Uniform(MaxShards*3, 3); err != nil || l.Len() != MaxShards {
		t.Errorf("Uniform(MaxShards*3, 3): %d shards, %v; want %d, nil", l.Len(), err, MaxShards)
	}
	if l, err := Uniform(1<<64-1, 1<<63); err != nil || l.Len() != 2 || l.Shard(1).Last() != 1<<64-2 {
		t.Errorf("Uniform(2^64-1, 2^63): %v, %v", l.Ranges(), err)
	}
}

// TestShardOf: binary search agrees with a linear scan for every id, and
// ids past the total have no shard.
func TestShardOf(t *testing.T) {
	layouts := map[string]Layout{
		"uniform": mustUniform(t, 103, 10),
		"one":     mustUniform(t, 5, 1024),
	}
	var err error
	if layouts["tars"], err = LayoutFromRanges(12, []Range{{0, 1, "a.tar"}, {1, 7, "b.tar"}, {8, 3, "c.tar"}, {11, 1, "d.tar"}}); err != nil {
		t.Fatal(err)
	}
	for name, l := range layouts {
		for id := range l.Total() {
			want := -1
			for i := range l.Len() {
				if r := l.Shard(i); id >= r.First && id <= r.Last() {
					want = i
				}
			}
			if got, ok := l.ShardOf(id); !ok || got != want {
				t.Errorf("%s: ShardOf(%d): got %d, %v, want %d", name, id, got, ok, want)
			}
		}
		if _, ok := l.ShardOf(l.Total()); ok {
			t.Errorf("%s: ShardOf(total) found a shard", name)
		}
	}
	if _, ok := (Layout{}).ShardOf(0); ok {
		t.Error("the empty layout has a shard for id 0")
	}
}

func TestLayoutFromRanges(t *testing.T) {
	tests := []struct {
		name   string
		total  uint64
		ranges []Range
		want   error // nil: valid
	}{
		{"tar shards", 10, []Range{{0, 3, "a.tar"}, {3, 7, "b.tar"}}, nil},
		{"one shard", 5, []Range{{0, 5, "x"}}, nil},
		{"empty catalog", 0, nil, nil},
		{"no shards", 5, nil, ErrNoShards},
		{"starts past 0", 10, []Range{{1, 9, "a"}}, ErrGap},
		{"gap", 10, []Range{{0, 3, "a"}, {4, 6, "b"}}, ErrGap},
		{"overlap", 10, []Range{{0, 3, "a"}, {2, 8, "b"}}, ErrOverlap},
		{"out of order", 10, []Range{{5, 5, "b"}, {0, 5, "a"}}, ErrGap},
		{"empty shard", 10, []Range{{0, 10, "a"}, {10, 0, "b"}}, ErrEmptyShard},
		{"short of the total", 10, []Range{{0, 9, "a"}}, ErrTotal},
		{"past the total", 10, []Range{{0, 11, "a"}}, ErrTotal},
		{"overflow", 10, []Range{{0, 5, "a"}, {5, 1<<64 - 1, "b"}}, ErrTotal},
		{"shards on an empty catalog", 0, []Range{{0, 1, "a"}}, ErrTotal},
		{"unnamed", 10, []Range{{0, 10, ""}}, ErrShardName},
		{"name not UTF-8", 10, []Range{{0, 10, "a\xff"}}, ErrShardName},
		{"long name", 10, []Range{{0, 10, strings.Repeat("n", MaxNameBytes+1)}}, ErrShardName},
		{"longest name", 10, []Range{{0, 10, strings.Repeat("n", MaxNameBytes)}}, nil},
		{"too many", MaxShards + 1, make([]Range, MaxShards+1), ErrTooManyShards},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := LayoutFromRanges(tt.total, tt.ranges)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got %v, want a layout", err)
				}
				if got := l.Ranges(); !reflect.DeepEqual(got, tt.ranges) && len(got)+len(tt.ranges) > 0 {
					t.Errorf("Ranges: got %v, want %v", got, tt.ranges)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	// The layout keeps its own copy.
	rs := []Range{{0, 2, "a"}}
	l, err := LayoutFromRanges(2, rs)
	if err != nil {
		t.Fatal(err)
	}
	rs[0].Name = "changed"
	if l.Shard(0).Name != "a" {
		t.Error("the layout shares the caller's slice")
	}
	// A uniform layout passes its own check.
	u := mustUniform(t, 1000, 7)
	if v, err := LayoutFromRanges(u.Total(), u.Ranges()); err != nil || v.Digest() != u.Digest() {
		t.Errorf("LayoutFromRanges(Uniform(1000, 7)): digest %s vs %s, %v", v.Digest(), u.Digest(), err)
	}
}

func TestLayoutDigest(t *testing.T) {
	a := mustUniform(t, 1000, 100)
	for _, other := range []Layout{mustUniform(t, 1000, 99), mustUniform(t, 999, 100), mustUniform(t, 1001, 100)} {
		if other.Digest() == a.Digest() {
			t.Errorf("layouts %v and %v share digest %s", a.Ranges()[:2], other.Ranges()[:2], a.Digest())
		}
	}
	rs := a.Ranges()
	rs[3].Name = "renamed"
	b, err := LayoutFromRanges(a.Total(), rs)
	if err != nil {
		t.Fatal(err)
	}
	if b.Digest() == a.Digest() {
		t.Error("renaming a shard keeps the digest")
	}
}

// FuzzLayoutFromRanges feeds LayoutFromRanges arbitrary range lists, as a
// storage agent's InfoResponse could carry them: it must never panic, must
// fail with one of its sentinels, and whatever it accepts must be a layout
// (contiguous from 0, non-empty shards, summing to the total, every id's
// ShardOf inside its shard).
func FuzzLayoutFromRanges(f *testing.F) {
	add := func(total uint64, rs []Range) {
		var b []byte
		for _, r := range rs {
			b = binary.AppendUvarint(b, r.First)
			b = binary.AppendUvarint(b, r.Count)
			b = binary.AppendUvarint(b, uint64(len(r.Name)))
			b = append(b, r.Name...)
		}
		f.Add(total, b)
	}
	add(10, []Range{{0, 3, "a.tar"}, {3, 7, "b.tar"}})
	add(10, []Range{{0, 3, "a"}, {2, 8, "b"}})
	add(10, []Range{{0, 5, "a"}, {5, 1<<64 - 1, "b"}})
	add(0, nil)
	add(4, []Range{{0, 4, "\xff"}})
	f.Fuzz(func(t *testing.T, total uint64, data []byte) {
		var rs []Range
		for len(data) > 0 && len(rs) <= 64 {
			var v [3]uint64
			for i := range v {
				x, n := binary.Uvarint(data)
				if n <= 0 {
					x, n = uint64(data[0]), 1
				}
				v[i], data = x, data[n:]
				if len(data) == 0 && i < 2 {
					break
				}
			}
			nameLen := int(min(v[2], uint64(len(data))))
			rs = append(rs, Range{First: v[0], Count: v[1], Name: string(data[:nameLen])})
			data = data[nameLen:]
		}
		l, err := LayoutFromRanges(total, rs)
		if err != nil {
			for _, want := range []error{ErrTooManyShards, ErrNoShards, ErrGap, ErrOverlap, ErrEmptyShard, ErrTotal, ErrShardName} {
				if errors.Is(err, want) {
					return
				}
			}
			t.Fatalf("error %v wraps no sentinel", err)
		}
		if l.Total() != total || l.Len() != len(rs) {
			t.Fatalf("layout of %d shards, total %d; from %d ranges, total %d", l.Len(), l.Total(), len(rs), total)
		}
		next := uint64(0)
		for i := range l.Len() {
			r := l.Shard(i)
			if r.First != next || r.Count == 0 {
				t.Fatalf("shard %d is %+v, want it to start at %d", i, r, next)
			}
			for _, id := range []uint64{r.First, r.Last(), r.First + r.Count/2} {
				if got, ok := l.ShardOf(id); !ok || got != i {
					t.Fatalf("ShardOf(%d): got %d, %v, want %d", id, got, ok, i)
				}
			}
			next += r.Count
		}
		if next != total {
			t.Fatalf("shards sum to %d, total %d", next, total)
		}
	})
}
