package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"github.com/sophon-dl/sophon/compute-agent/report"
	agentepoch "github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/internal/placement"
)

// The 2 x 2 shard runs (issue 12, item 3): two storage agents, gossip-
// joined, each shard on R of them; two compute agents, ranks 0 and 1 of a
// world of 2. One storage agent is killed with SIGKILL in the middle of
// epoch 1.

const (
	// shardSamples is the data set's size: 2 s epochs of 112 samples a
	// rank (whole batches) at a simulated 60 img/s, long enough that a
	// storage agent killed half a second into one leaves some of its
	// shards unfetched.
	shardSamples = 240
	shardSize    = 16
	shardBatch   = 16
	shardSeed    = 7
)

// shardRun is what one 2 x 2 run left: each rank's epochs and deliveries.
type shardRun struct {
	reports [2][]report.EpochReport
	samples [2][]delivery
}

// runShards runs a cell of len(data) storage agents (data[i] is agent
// s<i+1>'s directory; with a manifest, each has part of the files) and two
// ranks with replicas R, and kills the last storage agent once rank 0
// reported its first epoch.
func runShards(t *testing.T, bins agentBinaries, data []string, manifest string, replicas int) shardRun {
	t.Helper()
	gossip := make([]string, len(data))
	st := make([]*storageProc, len(data))
	addrs := make([]string, len(data))
	for i := range st {
		gossip[i] = testutil.FreeAddr(t)
		args := []string{"--data", data[i], "--listen", testutil.FreeAddr(t), "--cpus", "1", "--insecure", "--log-level", "info",
			"--name", "s" + strconv.Itoa(i+1), "--gossip", gossip[i], "--replicas", strconv.Itoa(replicas),
			"--shard-size", strconv.Itoa(shardSize)}
		if i > 0 {
			args = append(args, "--join", gossip[0])
		}
		if manifest != "" {
			args = append(args, "--manifest", manifest)
		}
		st[i] = &storageProc{t: t, bin: bins.storage, addr: args[3], args: args}
		st[i].start()
		addrs[i] = st[i].addr
	}
	if replicas == 1 && manifest == "" {
		// Each must see the other before the epoch: then each holds half.
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(st[0].p.logs.String(), "held shards changed") || !strings.Contains(st[1].p.logs.String(), "held shards changed") {
			if time.Now().After(deadline) {
				t.Fatalf("the storage agents never split the shards:\n%s\n%s", st[0].p.logs.String(), st[1].p.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	dirs := [2]string{t.TempDir(), t.TempDir()}
	var cps [2]*proc
	for r := range cps {
		args := []string{"--storage", strings.Join(addrs, ","), "--rank", strconv.Itoa(r), "--world", "2",
			"--epochs", "3", "--seed", strconv.Itoa(shardSeed), "--plan", "nooff", "--batch", strconv.Itoa(shardBatch),
			"--drop-last", "--queue", "1", "--window", "4", "--gpu", "sim:60", "--on-error", "skip", "--retry-budget", "2s", "--insecure", "--log-level", "warn",
			"--report", filepath.Join(dirs[r], "epochs.jsonl"), "--samples-out", filepath.Join(dirs[r], "samples.txt")}
		cps[r] = start(t, command(context.Background(), bins.compute, args...))
	}
	report0 := filepath.Join(dirs[0], "epochs.jsonl")
	killed := false
	deadline := time.Now().Add(2 * time.Minute)
	for _, p := range cps {
		for done := false; !done; {
			select {
			case <-p.done:
				done = true
			case <-time.After(20 * time.Millisecond):
			}
			if !killed {
				if reps, _ := report.ReadReport(report0); len(reps) >= 1 {
					// Into epoch 1, while its fetches go on: --queue 1 and
					// --window 4 keep them a few samples ahead of the
					// consumer's 60 samples/s.
					time.Sleep(500 * time.Millisecond)
					syscall.Kill(-st[len(st)-1].p.cmd.Process.Pid, syscall.SIGKILL)
					killed = true
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the compute agents did not finish in 2 minutes:\n%s", p.logs.String())
			}
		}
		if p.err != nil {
			t.Fatalf("compute agent: %v\n%s", p.err, p.logs.String())
		}
	}
	if !killed {
		t.Fatal("the run ended before the kill")
	}
	var out shardRun
	for r := range 2 {
		reps, err := report.ReadReport(filepath.Join(dirs[r], "epochs.jsonl"))
		if err != nil || len(reps) != 3 {
			t.Fatalf("rank %d: %d reports (%v)", r, len(reps), err)
		}
		out.reports[r] = reps
		out.samples[r] = readSamples(t, filepath.Join(dirs[r], "samples.txt"))
	}
	return out
}

// TestShardsTwoByTwo: with R=2 every epoch of both ranks completes exactly
// once despite the kill; with R=1 the killed agent's samples are reported
// unavailable in the epoch of the kill, never silently dropped, and the
// next epoch places its shards on the survivor; both give equal batch
// counts per rank and the same tensors for the same (epoch, sample).
func TestShardsTwoByTwo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agents for about 30 s")
	}
	bins := buildAgents(t)
	data := imageSet(t, shardSamples)
	total := uint64(shardSamples)
	hashes := map[[2]uint64]string{}
	for _, replicas := range []int{2, 1} {
		run := runShards(t, bins, []string{data, data}, "", replicas)
		perEpoch := checkShards(t, run, "R="+strconv.Itoa(replicas), total, hashes)
		unavailable := perEpoch[0] + perEpoch[1] + perEpoch[2]
		switch {
		case replicas == 2 && unavailable > 0:
			t.Errorf("R=2: %d samples unavailable, want none (every shard has a live replica)", unavailable)
		case replicas == 1 && unavailable == 0:
			t.Errorf("R=1: no sample reported unavailable after its only holder was killed")
		case replicas == 1 && perEpoch[2] > 0:
			// The dead agent is unreachable at epoch 2's start: its shards
			// are placed over the survivor, which has the data.
			t.Errorf("R=1: %d samples unavailable in epoch 2, after the dead agent's shards could be placed on the survivor", perEpoch[2])
		}
	}
}

// checkShards checks a shard run: both ranks form the same number of
// batches; every sample of each rank's order is delivered or reported
// UNAVAILABLE exactly once per epoch; a tensor equals the one hashes holds
// for its (epoch, sample), from this run or another. It returns the
// samples reported unavailable per epoch, both ranks together.
func checkShards(t *testing.T, run shardRun, name string, total uint64, hashes map[[2]uint64]string) (perEpoch [3]int) {
	t.Helper()
	for e := range uint64(3) {
		if b0, b1 := run.reports[0][e].Batches, run.reports[1][e].Batches; e == 0 && (b0 != b1 || b0 == 0) {
			t.Errorf("%s epoch 0: %d and %d batches, want the same for both ranks", name, b0, b1)
		}
		for r := range 2 {
			rep := run.reports[r][e]
			got := map[uint64]int{}
			for _, d := range run.samples[r] {
				if d.epoch != e {
					continue
				}
				got[d.sample]++
				k := [2]uint64{e, d.sample}
				if h, ok := hashes[k]; ok && h != d.sha {
					t.Errorf("%s epoch %d sample %d: tensor differs from the other run's", name, e, d.sample)
				}
				hashes[k] = d.sha
			}
			for _, f := range rep.Failed {
				if f.Kind != report.KindUnavailable {
					t.Errorf("%s rank %d epoch %d: failure %+v, want only UNAVAILABLE", name, r, e, f)
				}
				got[f.Sample]++
				perEpoch[e]++
			}
			ids := agentepoch.RankOrder(shardSeed, e, r, 2, total, shardBatch, true)
			for _, s := range ids {
				if got[s] != 1 {
					t.Errorf("%s rank %d epoch %d: sample %d delivered or reported %d times, want once", name, r, e, s, got[s])
				}
			}
			if len(got) != len(ids) || rep.Samples+rep.SamplesFailed != len(ids) {
				t.Errorf("%s rank %d epoch %d: %d distinct samples, %d delivered + %d failed, want %d", name, r, e, len(got), rep.Samples, rep.SamplesFailed, len(ids))
			}
			t.Logf("%s rank %d epoch %d: %.2f s, %d delivered, %d unavailable, by storage %+v", name, r, e, rep.Seconds, rep.Samples, rep.SamplesFailed, rep.ByStorage)
		}
	}
	return perEpoch
}

// TestShardsPartialData: storage agents that each have only the files
// "storage-agent place" lists for them, all started with the whole
// dataset's manifest ("storage-agent manifest"). Three agents with R=2:
// every epoch exactly once although one is killed mid-epoch. Two agents
// with R=1: the killed agent's samples are reported UNAVAILABLE in the
// epoch of the kill, and in the next epoch exactly the samples of its
// shards are, because no survivor has their files (re-placement puts a
// shard only on an agent that stores it). Tensors equal across runs.
func TestShardsPartialData(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agents for about 30 s")
	}
	bins := buildAgents(t)
	data := imageSet(t, shardSamples)
	total := uint64(shardSamples)
	man := filepath.Join(t.TempDir(), "manifest")
	if out, err := exec.Command(bins.storage, "manifest", "--data", data, "--out", man, "--index", "-").CombinedOutput(); err != nil {
		t.Fatalf("storage-agent manifest: %v\n%s", err, out)
	}
	hashes := map[[2]uint64]string{}
	for _, tt := range []struct{ agents, replicas int }{{3, 2}, {2, 1}} {
		name := fmt.Sprintf("%d agents, R=%d", tt.agents, tt.replicas)
		var members []string
		for i := range tt.agents {
			members = append(members, "s"+strconv.Itoa(i+1))
		}
		dirs := make([]string, tt.agents)
		for i, m := range members {
			out, err := exec.Command(bins.storage, "place", "--manifest", man, "--members", strings.Join(members, ","),
				"--replicas", strconv.Itoa(tt.replicas), "--shard-size", strconv.Itoa(shardSize), "--member", m).Output()
			if err != nil {
				t.Fatalf("storage-agent place: %v", err)
			}
			dirs[i] = t.TempDir()
			for _, rel := range strings.Fields(string(out)) {
				b, err := os.ReadFile(filepath.Join(data, rel))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(dirs[i], filepath.Dir(rel)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dirs[i], rel), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		run := runShards(t, bins, dirs, man, tt.replicas)
		perEpoch := checkShards(t, run, name, total, hashes)
		if tt.replicas == 2 {
			if n := perEpoch[0] + perEpoch[1] + perEpoch[2]; n > 0 {
				t.Errorf("%s: %d samples unavailable, want none (every shard is on two agents)", name, n)
			}
			continue
		}
		// The killed agent, s2, stores these shards alone.
		nShards := int((total + shardSize - 1) / shardSize)
		lost := map[uint64]bool{}
		for _, sh := range placement.Assign(members, nShards, 1)["s2"] {
			for id := uint64(sh * shardSize); id < min(uint64(sh+1)*shardSize, total); id++ {
				lost[id] = true
			}
		}
		if perEpoch[0] != 0 || perEpoch[1] == 0 {
			t.Errorf("%s: %d unavailable in epoch 0 and %d in the epoch of the kill, want none and some", name, perEpoch[0], perEpoch[1])
		}
		for r := range 2 {
			want := 0
			for _, id := range agentepoch.RankOrder(shardSeed, 2, r, 2, total, shardBatch, true) {
				if lost[id] {
					want++
				}
			}
			for _, f := range run.reports[r][2].Failed {
				if !lost[f.Sample] {
					t.Errorf("%s rank %d epoch 2: sample %d unavailable, but s1 stores it", name, r, f.Sample)
				}
			}
			if got := run.reports[r][2].SamplesFailed; got != want || want == 0 {
				t.Errorf("%s rank %d epoch 2: %d unavailable, want the %d of s2's shards", name, r, got, want)
			}
		}
	}
}
