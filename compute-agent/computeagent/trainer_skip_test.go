package computeagent

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sophon-dl/sophon/compute-agent/epoch"
	"github.com/sophon-dl/sophon/compute-agent/handoff"
)

// skipFake serves the first n test samples; those in bad are truncated
// JPEGs, which fail to decode.
func skipFake(t *testing.T, n int, bad []uint64) *fakeStorage {
	s := newFake(t, "s1")
	data := slices.Clone(s.data[:n])
	for _, b := range bad {
		data[b] = data[b][:len(data[b])/2]
	}
	s.data = data
	return s
}

// runSkipRanks runs epoch 0 for world ranks over total samples, bad of
// them failing, under --on-error skip in batches of 4: every rank on one
// agent, or (agents > 1) each rank on an agent of its own.
func runSkipRanks(t *testing.T, world, agents, total int, bad []uint64, strict, dropLast bool) []*testTrainer {
	t.Helper()
	mod := func(c *Config) {
		c.Batch, c.StrictOrder, c.OnError = 4, strict, OnErrorSkip
		c.Trainer.DropLast = dropLast
	}
	ts := make([]*testTrainer, world)
	var path string
	for r := range world {
		hello := handoff.HelloMsg{Rank: r, World: world, LocalRank: r, LocalWorld: world}
		if agents > 1 {
			hello.LocalRank, hello.LocalWorld = 0, 1
		}
		if r == 0 || agents > 1 {
			path, _ = startTrainerAgentOn(t, skipFake(t, total, bad), mod)
		}
		tt, err := dialTrainer(t, path, hello)
		if err != nil {
			t.Fatal(err)
		}
		ts[r] = tt
	}
	var wg sync.WaitGroup
	for _, tt := range ts {
		wg.Go(func() {
			if err := tt.epoch(0, nil); err != nil && !errors.Is(err, errStopped) {
				t.Errorf("epoch: %v", err)
			}
		})
	}
	wg.Wait()
	return ts
}

// TestTrainerSkippedSamplesKeepBatchesFull: with 4 samples of one batch
// failing under --on-error skip, the next samples take their rows and the
// rows left free at the end of the epoch repeat the rank's first rows, so
// every rank gets batches_per_epoch batches of the sizes it has without
// failures: no 0-row batch, only the last short and none with
// --drop-last; every global position comes once (a repeat carries a failed
// sample's), no failed sample is delivered, and in strict order a rank's
// rows are its order less the failed samples, then its first rows again.
func TestTrainerSkippedSamplesKeepBatchesFull(t *testing.T) {
	for _, tc := range []struct{ world, agents, total int }{{1, 1, 12}, {1, 1, 13}, {2, 1, 26}, {2, 2, 26}} {
		for _, strict := range []bool{false, true} {
			for _, dropLast := range []bool{false, true} {
				name := fmt.Sprintf("world=%d/agents=%d/samples=%d/strict=%v/drop_last=%v", tc.world, tc.agents, tc.total, strict, dropLast)
				t.Run(name, func(t *testing.T) {
					// The 4 samples of rank 0's first batch in strict order.
					bad := slices.Clone(epoch.RankOrder(7, 0, 0, tc.world, uint64(tc.total), 4, dropLast)[:4])
					ts := runSkipRanks(t, tc.world, tc.agents, tc.total, bad, strict, dropLast)
					checkSkipRanks(t, ts, tc.world, tc.total, bad, strict, dropLast)
				})
			}
		}
	}
}

func checkSkipRanks(t *testing.T, ts []*testTrainer, world, total int, bad []uint64, strict, dropLast bool) {
	t.Helper()
	m := epoch.RankSamples(world, uint64(total), 4, dropLast)
	var want []int
	for b := 0; b*4 < m; b++ {
		want = append(want, min(4, m-b*4))
	}
	seen := map[uint64]int{}
	for r, tt := range ts {
		if !slices.Equal(tt.sizes, want) {
			t.Errorf("rank %d: batches of %v rows, want %v", r, tt.sizes, want)
		}
		var got []uint64
		for _, row := range tt.rows {
			seen[row.pos]++
			got = append(got, row.sample)
			if slices.Contains(bad, row.sample) {
				t.Errorf("rank %d: failed sample %d delivered", r, row.sample)
			}
		}
		if strict {
			good := slices.DeleteFunc(epoch.RankOrder(7, 0, r, world, uint64(total), 4, dropLast), func(s uint64) bool { return slices.Contains(bad, s) })
			for i := range m - len(good) {
				good = append(good, good[i%min(len(good), 4)])
			}
			if !slices.Equal(got, good) {
				t.Errorf("rank %d strict rows: samples %v, want %v", r, got, good)
			}
		}
	}
	if len(seen) != world*m {
		t.Errorf("%d positions delivered, want %d", len(seen), world*m)
	}
	for p, c := range seen {
		if c != 1 || p >= uint64(world*m) {
			t.Errorf("position %d delivered %d times (of %d)", p, c, world*m)
		}
	}
}

// TestTrainerRankWithNoGoodSample: when every sample of a rank fails, in
// strict order it has no row of its own to repeat and its batches come
// with 0 rows, still batches_per_epoch of them (the other rank's are
// full); in completion order it repeats the other local rank's rows.
func TestTrainerRankWithNoGoodSample(t *testing.T) {
	const total = 8 // rank 0 of 2 holds the even samples: 4 rows, 1 batch
	bad := []uint64{0, 2, 4, 6}
	for _, strict := range []bool{true, false} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			ts := runSkipRanks(t, 2, 1, total, bad, strict, false)
			want := [][]int{{4}, {4}}
			if strict {
				want[0] = []int{0}
			}
			for r, tt := range ts {
				if !slices.Equal(tt.sizes, want[r]) {
					t.Errorf("rank %d: batches of %v rows, want %v", r, tt.sizes, want[r])
				}
			}
		})
	}
}
