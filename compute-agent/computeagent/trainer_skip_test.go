package computeagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/internal/testutil"
)

// skipFake serves the first n test samples; those in bad are truncated
// JPEGs, which fail to decode.
func skipFake(t *testing.T, n int, bad []uint64) *enginetest.Storage {
	s := enginetest.NewStorage(t, "s1")
	data := slices.Clone(s.Data[:n])
	for _, b := range bad {
		data[b] = data[b][:len(data[b])/2]
	}
	s.Data = data
	return s
}

// runSkipRanks runs epoch 0 for world ranks over total samples, bad of
// them failing, under --on-error skip in batches of 4: every rank on one
// agent, or (agents > 1) each rank on an agent of its own.
func runSkipRanks(t *testing.T, world, agents, total int, bad []uint64, strict, dropLast bool) []*testTrainer {
	t.Helper()
	dir := t.TempDir()
	var reports []string
	mod := func(c *Config) {
		c.Batch, c.StrictOrder, c.OnError = 4, strict, OnErrorSkip
		c.Trainer.DropLast = dropLast
		c.ReportPath = filepath.Join(dir, fmt.Sprintf("agent%d.jsonl", len(reports)))
		reports = append(reports, c.ReportPath)
	}
	t.Cleanup(func() { checkSkipReports(t, reports) })
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

// checkSkipReports: each agent's epoch is accounted (delivered and failed
// add up to its shard, as the agent requires of an epoch), its repeated
// rows counted apart from the samples it delivered. The reports are written
// once the agents stop (the tests' trainers leave after one epoch).
func checkSkipReports(t *testing.T, paths []string) {
	t.Helper()
	for _, p := range paths {
		var b []byte
		for deadline := time.Now().Add(10 * time.Second); len(b) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			b, _ = os.ReadFile(p)
		}
		var r report.EpochReport
		if err := json.Unmarshal(bytes.SplitN(b, []byte("\n"), 2)[0], &r); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		repeated := 0
		for _, tr := range r.Trainers {
			repeated += tr.Repeated
		}
		if r.Samples+r.SamplesFailed != r.Shard || r.Samples+repeated != rowsOf(r) {
			t.Errorf("%s: %d delivered + %d failed of %d, %d rows of which %d repeated", p, r.Samples, r.SamplesFailed, r.Shard, rowsOf(r), repeated)
		}
	}
}

// rowsOf is the rows the ranks of r were handed.
func rowsOf(r report.EpochReport) int {
	n := 0
	for _, tr := range r.Trainers {
		n += tr.Samples
	}
	return n
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
					bad := slices.Clone(schedule.RankOrder(7, 0, 0, tc.world, uint64(tc.total), 4, dropLast)[:4])
					ts := runSkipRanks(t, tc.world, tc.agents, tc.total, bad, strict, dropLast)
					checkSkipRanks(t, ts, tc.world, tc.total, bad, strict, dropLast)
				})
			}
		}
	}
}

func checkSkipRanks(t *testing.T, ts []*testTrainer, world, total int, bad []uint64, strict, dropLast bool) {
	t.Helper()
	m := schedule.RankSamples(world, uint64(total), 4, dropLast)
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
			good := slices.DeleteFunc(schedule.RankOrder(7, 0, r, world, uint64(total), 4, dropLast), func(s uint64) bool { return slices.Contains(bad, s) })
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

// pyRanks is a Python trainer of world local ranks on one node: each rank
// iterates one epoch through sophon.Loader against each agent named on its
// command line (socket and yield_empty pairs), in turn, and prints
// len(loader) and the rows of the batches the loop saw, one line per agent.
// One process per rank for every agent: PyTorch's import costs a CPU-second
// or more.
const pyRanks = `
import json, sys
import sophon
rank, world, cases = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
for sock, yield_empty in zip(cases[0::2], cases[1::2]):
    loader = sophon.Loader(sock, rank=rank, world=world, local_rank=rank, local_world=world,
                           yield_empty=yield_empty == "1", timeout=30)
    sizes = [int(images.shape[0]) for images, labels in loader]
    print(json.dumps({"len": len(loader), "sizes": sizes}), flush=True)
    sys.stdin.readline()  # a barrier: a rank leaving mid-epoch fails the others' epoch
    loader.close()
`

// rankCase is one agent that pythonRanks's trainer iterates an epoch of.
type rankCase struct {
	path       string
	yieldEmpty bool
}

// rankEpoch is what one rank's loop saw of one agent's epoch.
type rankEpoch struct {
	Len   int   `json:"len"`
	Sizes []int `json:"sizes"`
}

// pythonRanks runs pyRanks for world ranks against each case's agent in
// turn and returns, per case, each rank's len(loader) and batch rows. The
// ranks leave an epoch together: each waits on its stdin until every rank
// printed that epoch's line.
func pythonRanks(t *testing.T, world int, cases []rankCase) [][]rankEpoch {
	t.Helper()
	const python = "/usr/bin/python3"
	testutil.RequirePython(t, "python3-torch python3-numpy", "torch", "numpy")
	_, file, _, _ := runtime.Caller(0)
	env := append(os.Environ(), "PYTHONPATH="+filepath.Join(filepath.Dir(file), "../../python"))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var caseArgs []string
	for _, c := range cases {
		caseArgs = append(caseArgs, c.path, map[bool]string{false: "0", true: "1"}[c.yieldEmpty])
	}
	type rank struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout *bufio.Reader
		stderr bytes.Buffer
	}
	ranks := make([]*rank, world)
	defer func() {
		for r, rk := range ranks {
			if rk == nil {
				continue
			}
			rk.stdin.Close()
			if t.Failed() {
				rk.cmd.Process.Kill()
			}
			if err := rk.cmd.Wait(); err != nil && !t.Failed() {
				t.Errorf("rank %d: %v\n%s", r, err, rk.stderr.Bytes())
			}
		}
	}()
	for r := range world {
		rk := &rank{cmd: exec.CommandContext(ctx, python, append([]string{"-c", pyRanks, strconv.Itoa(r), strconv.Itoa(world)}, caseArgs...)...)}
		rk.cmd.Env, rk.cmd.Stderr = env, &rk.stderr
		stdin, err := rk.cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := rk.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := rk.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		rk.stdin, rk.stdout, ranks[r] = stdin, bufio.NewReader(stdout), rk
	}
	out := make([][]rankEpoch, len(cases))
	for c := range cases {
		out[c] = make([]rankEpoch, world)
		for r, rk := range ranks {
			line, err := rk.stdout.ReadBytes('\n')
			if err == nil {
				err = json.Unmarshal(line, &out[c][r])
			}
			if err != nil {
				t.Fatalf("agent %d, rank %d: %v\n%s", c, r, err, rk.stderr.Bytes())
			}
		}
		for _, rk := range ranks { // every rank printed this epoch: release them
			if _, err := io.WriteString(rk.stdin, "\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestPythonLoaderSkippedSamples runs TestTrainerSkippedSamplesKeepBatchesFull's
// epoch (26 samples, 4 of rank 0's first batch failing, batches of 4, two
// ranks) through the Python client: each rank's loop sees len(loader)
// batches of 4 rows, the last of 1 (none with --drop-last), and no empty
// one. When every sample of a rank fails (strict order), the rank's batch
// has no rows: its loop skips it by default and sees it with
// yield_empty=True, as docs/training.md says.
func TestPythonLoaderSkippedSamples(t *testing.T) {
	type skipCase struct {
		name string
		rankCase
		want [][]int // per rank
	}
	var cases []skipCase
	for _, tc := range []struct{ strict, dropLast bool }{{false, false}, {true, false}, {true, true}} {
		bad := slices.Clone(schedule.RankOrder(7, 0, 0, 2, 26, 4, tc.dropLast)[:4])
		path, _ := startTrainerAgentOn(t, skipFake(t, 26, bad), func(c *Config) {
			c.Batch, c.StrictOrder, c.OnError, c.Trainer.DropLast = 4, tc.strict, OnErrorSkip, tc.dropLast
		})
		want := []int{4, 4, 4, 1}
		if tc.dropLast {
			want = want[:3]
		}
		cases = append(cases, skipCase{fmt.Sprintf("strict=%v/drop_last=%v", tc.strict, tc.dropLast), rankCase{path, false}, [][]int{want, want}})
	}
	for _, yieldEmpty := range []bool{false, true} {
		path, _ := startTrainerAgentOn(t, skipFake(t, 8, []uint64{0, 2, 4, 6}), func(c *Config) {
			c.Batch, c.StrictOrder, c.OnError = 4, true, OnErrorSkip
		})
		want := [][]int{{}, {4}}
		if yieldEmpty {
			want[0] = []int{0}
		}
		cases = append(cases, skipCase{fmt.Sprintf("rank_all_failed/yield_empty=%v", yieldEmpty), rankCase{path, yieldEmpty}, want})
	}
	rcs := make([]rankCase, len(cases))
	for i, c := range cases {
		rcs[i] = c.rankCase
	}
	got := pythonRanks(t, 2, rcs)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for r, e := range got[i] {
				// len(loader) is batches_per_epoch, whatever the loop sees.
				wantLen := len(c.want[1])
				if e.Len != wantLen || !slices.Equal(e.Sizes, c.want[r]) {
					t.Errorf("rank %d: len %d, batches of %v rows; want %d batches, the loop seeing %v", r, e.Len, e.Sizes, wantLen, c.want[r])
				}
			}
		})
	}
}
