package testbed

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/computeagent"
)

// The 2 x 2 shard runs (issue 12, item 3): two storage agents, gossip-
// joined, each shard on R of them; two compute agents, ranks 0 and 1 of a
// world of 2. One storage agent is killed with SIGKILL in the middle of
// epoch 1.

const (
	shardSize  = 16
	shardBatch = 16
	shardSeed  = 7
)

// shardRun is what one 2 x 2 run left: each rank's epochs and deliveries.
type shardRun struct {
	reports [2][]computeagent.EpochReport
	samples [2][]delivery
}

// runShards runs the 2 x 2 cell with replicas R and kills the second
// storage agent once rank 0 reported its first epoch.
func runShards(t *testing.T, bins agentBinaries, data string, replicas int) shardRun {
	t.Helper()
	gossip := [2]string{freeAddr(t), freeAddr(t)}
	var st [2]*storageProc
	for i := range st {
		args := []string{"--data", data, "--listen", freeAddr(t), "--cpus", "1", "--insecure", "--log-level", "info",
			"--name", "s" + strconv.Itoa(i+1), "--gossip", gossip[i], "--replicas", strconv.Itoa(replicas),
			"--shard-size", strconv.Itoa(shardSize)}
		if i > 0 {
			args = append(args, "--join", gossip[0])
		}
		st[i] = &storageProc{t: t, bin: bins.storage, addr: args[3], args: args}
		st[i].start()
	}
	if replicas == 1 {
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
		args := []string{"--storage", st[0].addr + "," + st[1].addr, "--rank", strconv.Itoa(r), "--world", "2",
			"--epochs", "3", "--seed", strconv.Itoa(shardSeed), "--plan", "nooff", "--batch", strconv.Itoa(shardBatch),
			"--drop-last", "--queue", "1", "--gpu", "sim:60", "--on-error", "skip", "--retry-budget", "2s", "--insecure", "--log-level", "warn",
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
				if reps, _ := computeagent.ReadReport(report0); len(reps) >= 1 {
					time.Sleep(500 * time.Millisecond) // into epoch 1, while its fetches go on (--queue 1)
					syscall.Kill(-st[1].p.cmd.Process.Pid, syscall.SIGKILL)
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
		reps, err := computeagent.ReadReport(filepath.Join(dirs[r], "epochs.jsonl"))
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
	data := faultData(t)
	total := uint64(faultSamples)
	want := func(epoch uint64, rank int) []uint64 {
		return computeagent.RankOrder(shardSeed, epoch, rank, 2, total, shardBatch, true)
	}
	hashes := map[[2]uint64]string{}
	for _, replicas := range []int{2, 1} {
		run := runShards(t, bins, data, replicas)
		unavailable := 0
		var perEpoch [3]int
		for e := range uint64(3) {
			if b0, b1 := run.reports[0][e].Batches, run.reports[1][e].Batches; e == 0 && (b0 != b1 || b0 == 0) {
				t.Errorf("R=%d epoch 0: %d and %d batches, want the same for both ranks", replicas, b0, b1)
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
						t.Errorf("R=%d epoch %d sample %d: tensor differs from the other run's", replicas, e, d.sample)
					}
					hashes[k] = d.sha
				}
				for _, f := range rep.Failed {
					if f.Kind != computeagent.KindUnavailable {
						t.Errorf("R=%d rank %d epoch %d: failure %+v, want only UNAVAILABLE", replicas, r, e, f)
					}
					got[f.Sample]++
					unavailable++
					perEpoch[e]++
				}
				ids := want(e, r)
				for _, s := range ids {
					if got[s] != 1 {
						t.Errorf("R=%d rank %d epoch %d: sample %d delivered or reported %d times, want once", replicas, r, e, s, got[s])
					}
				}
				if len(got) != len(ids) || rep.Samples+rep.SamplesFailed != len(ids) {
					t.Errorf("R=%d rank %d epoch %d: %d distinct samples, %d delivered + %d failed, want %d", replicas, r, e, len(got), rep.Samples, rep.SamplesFailed, len(ids))
				}
				t.Logf("R=%d rank %d epoch %d: %.2f s, %d delivered, %d unavailable, by storage %+v", replicas, r, e, rep.Seconds, rep.Samples, rep.SamplesFailed, rep.ByStorage)
			}
		}
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
