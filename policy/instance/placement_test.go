package instance

import (
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/internal/placement"
)

// TestReplicaSetIsOwners: the replicas are placement.Owners of the
// sample's shard, in the same order.
func TestReplicaSetIsOwners(t *testing.T) {
	names := []string{"s0", "s1", "s2", "s3", "s4"}
	var buf []int16
	for _, seed := range []uint64{0, 1, 7} {
		for i := range uint64(200) {
			for r := 1; r <= len(names); r++ {
				buf = ReplicaSet(buf, i, names, r, seed)
				got := make([]string, len(buf))
				for k, j := range buf {
					got[k] = names[j]
				}
				if want := placement.Owners(int(seed<<32|i), names, r); !slices.Equal(got, want) {
					t.Fatalf("sample %d, seed %d, r %d: got %v, want %v", i, seed, r, got, want)
				}
			}
		}
	}
}
