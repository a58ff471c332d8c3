package placement

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// names returns n member names "s0".."s<n-1>".
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s%d", i)
	}
	return out
}

// TestWeightPinned pins a few weights, digests and owners: a change to the
// hash or its encoding would silently move every shard between versions of
// the agents, so it must fail here. The weights were checked against
// Python's hashlib: sha256(struct.pack(">Q", shard) + name)[:8].
func TestWeightPinned(t *testing.T) {
	tests := []struct {
		shard  int
		member string
		want   uint64
	}{
		{0, "", 0xaf5570f5a1810b7a},
		{0, "a", 0xd7fe8b5c4a504869},
		{1, "storage-1", 0x91cde2e675e946a0},
		{1023, "s2", 0x5134cad36421f56c},
		{-1, "x", 0x61bf5962ebce8d24},
		{MaxShards - 1, "storage-node-07.rack3.example.com", 0x6d4c20b9a6203828},
	}
	for _, tt := range tests {
		if got := Weight(tt.shard, tt.member); got != tt.want {
			t.Errorf("Weight(%d, %q): got %#x, want %#x", tt.shard, tt.member, got, tt.want)
		}
	}
	digests := []struct {
		name, got, want string
	}{
		{"Digest([0 1 2 3])", Digest([]int{0, 1, 2, 3}), "3067c72c5e501c31"},
		{"Digest([]uint32{0 1 2 3})", Digest([]uint32{0, 1, 2, 3}), "3067c72c5e501c31"},
		{"Digest([])", Digest([]int{}), "e3b0c44298fc1c14"},
		{"Digest([]uint32{7 9})", Digest([]uint32{7, 9}), "779b0d96c3b94acb"},
		{"Uniform(10, 4).Digest()", mustUniform(t, 10, 4).Digest(), "fd8d518399cca907"},
	}
	for _, d := range digests {
		if d.got != d.want {
			t.Errorf("%s: got %s, want %s", d.name, d.got, d.want)
		}
	}
	ms := []string{"s1", "s2", "s3", "s4", "s5"}
	wantOwners := [][]string{{"s5", "s3"}, {"s3", "s2"}, {"s3", "s5"}, {"s5", "s2"}}
	for s, want := range wantOwners {
		if got := Owners(s, ms, 2); !reflect.DeepEqual(got, want) {
			t.Errorf("Owners(%d, %v, 2): got %v, want %v", s, ms, got, want)
		}
	}
}

func mustUniform(t *testing.T, total, size uint64) Layout {
	t.Helper()
	l, err := Uniform(total, size)
	if err != nil {
		t.Fatalf("Uniform(%d, %d): %v", total, size, err)
	}
	return l
}

// TestOwnersDeterministic: the answer depends on the set of members, not on
// their order or repetition.
func TestOwnersDeterministic(t *testing.T) {
	ms := names(7)
	rng := rand.New(rand.NewPCG(1, 2))
	for s := range 200 {
		want := Owners(s, ms, 3)
		shuffled := slices.Clone(ms)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		shuffled = append(shuffled, shuffled[0], shuffled[3]) // repeated names count once
		if got := Owners(s, shuffled, 3); !reflect.DeepEqual(got, want) {
			t.Fatalf("shard %d: Owners(shuffled): got %v, want %v", s, got, want)
		}
		if got := Owners(s, ms, 3); !reflect.DeepEqual(got, want) {
			t.Fatalf("shard %d: Owners twice: got %v, then %v", s, want, got)
		}
		// The first r of the full ranking are the r owners.
		if all := Owners(s, ms, 0); !reflect.DeepEqual(all[:3], want) {
			t.Fatalf("shard %d: Owners(r=0)[:3] = %v, Owners(r=3) = %v", s, all[:3], want)
		}
	}
	if got := Owners(-1, ms, 2); got != nil {
		t.Errorf("Owners(-1): got %v, want none", got)
	}
	if got := Owners(0, nil, 2); len(got) != 0 {
		t.Errorf("Owners with no members: got %v, want none", got)
	}
}

// TestOwnersCount: each shard has exactly min(r, n) distinct owners (n when
// r is 0 or past n), all of them members, and Held and Assign agree with
// Owners for every member.
func TestOwnersCount(t *testing.T) {
	const shards = 300
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, r := range []int{0, 1, 2, 3, 10} {
			t.Run(fmt.Sprintf("n=%d,r=%d", n, r), func(t *testing.T) {
				ms := names(n)
				want := n
				if r > 0 && r < n {
					want = r
				}
				held := map[string][]int{}
				for s := range shards {
					owners := Owners(s, ms, r)
					if len(owners) != want {
						t.Fatalf("shard %d: %d owners %v, want %d", s, len(owners), owners, want)
					}
					if d := distinct(owners); len(d) != len(owners) {
						t.Fatalf("shard %d: owners %v repeat a member", s, owners)
					}
					for _, o := range owners {
						if !slices.Contains(ms, o) {
							t.Fatalf("shard %d: owner %q is no member", s, o)
						}
						held[o] = append(held[o], s)
					}
				}
				all := Assign(ms, shards, r)
				for _, m := range ms {
					got := Held(m, ms, shards, r)
					if !slices.Equal(got, held[m]) {
						t.Errorf("Held(%s): got %v, want %v", m, got, held[m])
					}
					if !slices.Equal(all[m], held[m]) {
						t.Errorf("Assign[%s]: got %v, want %v", m, all[m], held[m])
					}
				}
			})
		}
	}
}

func TestHeldEdges(t *testing.T) {
	ms := names(3)
	if got := Held("stranger", ms, 10, 2); got != nil {
		t.Errorf("Held(not a member): got %v, want none", got)
	}
	if got := Held("s0", ms, 0, 2); got != nil {
		t.Errorf("Held(0 shards): got %v, want none", got)
	}
	if got, want := Held("s0", []string{"s0"}, 4, 2), []int{0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("Held(alone): got %v, want %v", got, want)
	}
	if got, want := Held("s1", ms, 3, -1), []int{0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("Held(r=-1): got %v, want %v", got, want)
	}
	if got := Assign(nil, 10, 2); len(got) != 0 {
		t.Errorf("Assign(no members): got %v", got)
	}
	if got := Assign(ms, 0, 2); len(got) != 3 || len(got["s0"]) != 0 {
		t.Errorf("Assign(0 shards): got %v, want three empty lists", got)
	}
}

// TestBalance: with 8 members and 4096 shards every member holds within 20%
// of the mean, for 1, 2 and 3 replicas.
func TestBalance(t *testing.T) {
	const n, shards = 8, 4096
	ms := names(n)
	for _, r := range []int{1, 2, 3} {
		mean := float64(r*shards) / n
		for m, held := range Assign(ms, shards, r) {
			if c := float64(len(held)); c < 0.8*mean || c > 1.2*mean {
				t.Errorf("r=%d: %s holds %d shards, mean %.0f: more than 20%% off", r, m, len(held), mean)
			}
		}
	}
}

// slot is one ownership slot: a shard and one of its owners.
type slot struct {
	shard int
	owner string
}

// slots is the set of ownership slots.
func slots(members []string, shards, r int) map[slot]bool {
	out := map[slot]bool{}
	for m, held := range Assign(members, shards, r) {
		for _, s := range held {
			out[slot{s, m}] = true
		}
	}
	return out
}

// TestStability: a ninth member takes about 1/9 of the R*S ownership slots
// and every slot that moves goes to it; removing a member moves exactly its
// own slots, each to one of the remaining members, and nothing else.
func TestStability(t *testing.T) {
	const shards = 4096
	for _, r := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("r=%d", r), func(t *testing.T) {
			eight := names(8)
			nine := names(9)
			before, after := slots(eight, shards, r), slots(nine, shards, r)
			moved := 0
			for sl := range before {
				if !after[sl] {
					moved++
				}
			}
			for sl := range after {
				if !before[sl] && sl.owner != "s8" {
					t.Errorf("slot %v appeared for an old member when s8 joined", sl)
				}
			}
			total := float64(r * shards)
			if f := float64(moved) / total; f < 0.5/9 || f > 1.5/9 {
				t.Errorf("adding a 9th member moved %d of %.0f slots (%.3f), want between %.3f and %.3f", moved, total, f, 0.5/9, 1.5/9)
			}

			// Remove s3 from the eight.
			gone := "s3"
			seven := slices.DeleteFunc(slices.Clone(eight), func(m string) bool { return m == gone })
			less := slots(seven, shards, r)
			lost := 0
			for sl := range before {
				switch {
				case sl.owner == gone:
					lost++
				case !less[sl]:
					t.Errorf("slot %v of a remaining member moved when %s left", sl, gone)
				}
			}
			gained := 0
			for sl := range less {
				if !before[sl] {
					gained++
				}
			}
			if gained != lost {
				t.Errorf("%s left holding %d slots, %d slots were reassigned", gone, lost, gained)
			}
			if len(less) != r*shards {
				t.Errorf("after %s left: %d slots, want %d", gone, len(less), r*shards)
			}
		})
	}
}

func TestCheckHeld(t *testing.T) {
	tests := []struct {
		name   string
		held   []uint32
		shards int
		ok     bool
	}{
		{"empty", nil, 4, true},
		{"all", []uint32{0, 1, 2, 3}, 4, true},
		{"some", []uint32{1, 3}, 4, true},
		{"past the layout", []uint32{1, 4}, 4, false},
		{"no layout", []uint32{0}, 0, false},
		{"repeated", []uint32{1, 1}, 4, false},
		{"descending", []uint32{2, 1}, 4, false},
		{"longer than the layout", []uint32{0, 1, 2, 3, 4}, 4, false},
		{"max uint32", []uint32{1<<32 - 1}, MaxShards, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckHeld(tt.held, tt.shards)
			if tt.ok && err != nil {
				t.Errorf("CheckHeld(%v, %d): %v", tt.held, tt.shards, err)
			}
			if !tt.ok && !errors.Is(err, ErrHeld) {
				t.Errorf("CheckHeld(%v, %d): got %v, want %v", tt.held, tt.shards, err, ErrHeld)
			}
		})
	}
}

// BenchmarkHeld measures a recomputation for a large dataset: 1250 shards
// (ImageNet in shards of 1024) over 16 members.
func BenchmarkHeld(b *testing.B) {
	ms := names(16)
	for b.Loop() {
		Held("s7", ms, 1250, 2)
	}
	b.ReportMetric(float64(1250*16*b.N)/b.Elapsed().Seconds(), "weights/s")
}
