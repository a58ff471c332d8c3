package policy_test

import (
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/instance"
	"github.com/sophon-dl/sophon/profiler"
)

// TestClusterHeterogeneousEgress is what the testbed will measure for
// real: one storage node with 4x the others' egress, data replicated. A
// rate-blind client (round robin) is held back by the slow nodes; optimal
// shifts traffic to the fast one and offloads, and comes within 10% of the
// bound.
func TestClusterHeterogeneousEgress(t *testing.T) {
	for _, c := range []struct {
		name   string
		spec   instance.Spec
		rrWant float64 // round robin / optimal at least
	}{
		{"4 nodes, full replication, openimages-like", instance.Spec{Kind: "openimages-like", Samples: 20000, Cut: true, Seed: 1,
			Storage: 4, Compute: 2, RanksPerNode: 4, Replicas: 4, StorageCores: 4, EgressBytesPerSec: 50e6, FastEgress: 4, ComputeCores: 32}, 1.6},
		{"3 nodes, 2 replicas, imagenet-like", instance.Spec{Kind: "imagenet-like", Samples: 30000, Cut: true, Seed: 2,
			Storage: 3, Compute: 2, RanksPerNode: 2, Replicas: 2, StorageCores: 2, EgressBytesPerSec: 50e6, FastEgress: 4, ComputeCores: 32}, 1.6},
		{"2 nodes, no cut, little storage CPU", instance.Spec{Kind: "imagenet-like", Samples: 30000, Seed: 3,
			Storage: 2, Compute: 1, RanksPerNode: 2, Replicas: 2, StorageCores: 0.5, EgressBytesPerSec: 50e6, FastEgress: 4, ComputeCores: 32}, 1.6},
		// Raw only (no storage CPU to speak of): replica choice alone;
		// optimal sends 4/5 of the bytes to the fast node, round robin
		// half, 2.5x slower.
		{"2 nodes, replica choice only", instance.Spec{Kind: "imagenet-like", Samples: 20000, Seed: 4,
			Storage: 2, Compute: 1, RanksPerNode: 1, Replicas: 2, StorageCores: 1e-4, EgressBytesPerSec: 50e6, FastEgress: 4, ComputeCores: 32}, 2.4},
		// Eight nodes, pairs hashed over them, compute CPU and GPU
		// limited too: only the bound is asserted.
		{"8 nodes, 2 replicas, every resource limited", instance.Spec{Kind: "imagenet-like", Samples: 60000, Cut: true, Seed: 5,
			Storage: 8, Compute: 4, RanksPerNode: 4, Replicas: 2, StorageCores: 2, EgressBytesPerSec: 60e6, FastEgress: 4,
			ComputeCores: 24, IngressBytesPerSec: 200e6, GPUSamplesPerSec: 3000}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, cl, pl, err := c.spec.Build()
			if err != nil {
				t.Fatal(err)
			}
			plans, b, err := policy.All(policy.On(p, cl, pl))
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]policy.Plan{}
			for _, plan := range plans {
				byName[plan.Policy] = plan
				t.Logf("%-10s %8.3f s (%.3f x bound) %v", plan.Policy, plan.Pred.Seconds, plan.Pred.Seconds/b.Seconds, plan.Pred.Bottleneck)
			}
			t.Logf("bound %.3f s, bucketed LP %.3f s, %d buckets", b.Seconds, b.BucketLP, b.Buckets)
			opt, rr := byName[policy.NameOptimal].Pred.Seconds, byName[policy.NameRoundRobin].Pred.Seconds
			if opt > 1.1*b.Seconds {
				t.Errorf("optimal %.3f s is more than 10%% above the bound %.3f s", opt, b.Seconds)
			}
			if rr < c.rrWant*opt {
				t.Errorf("round robin %.3f s is only %.2fx optimal's %.3f s, want >= %.1fx", rr, rr/opt, opt, c.rrWant)
			}
		})
	}
}

var (
	scaleOnce sync.Once
	scaleP    *profiler.Profile
	scaleC    policy.Cluster
	scalePl   *policy.Placement
)

func scaleInstance(b *testing.B) (*profiler.Profile, policy.Cluster, *policy.Placement) {
	scaleOnce.Do(func() {
		var err error
		scaleP, scaleC, scalePl, err = instance.Scale().Build()
		if err != nil {
			b.Fatal(err)
		}
	})
	return scaleP, scaleC, scalePl
}

// BenchmarkClusterScale plans the scale instance
// (instance.Scale: 1,281,167 samples, 8 storage agents, 64 ranks on 8
// compute nodes, 2 replicas): ClusterSolve (optimal and the bound) and
// ClusterBound alone. Run it with -benchtime 1x (make bench-cluster runs
// `policy scale`, which reports the same and every baseline).
func BenchmarkClusterScale(b *testing.B) {
	p, c, pl := scaleInstance(b)
	runtime.GC()
	for _, bc := range []struct {
		name string
		f    func() error
	}{
		{"solve", func() error { _, _, err := policy.Solve(policy.NameOptimal, policy.On(p, c, pl)); return err }},
		{"bound", func() error { _, err := policy.Bound(policy.On(p, c, pl)); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if err := bc.f(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(len(p.Samples))*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
			var ru syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
				b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MiB")
			}
		})
	}
}

// processCPU is the process's user and system CPU time so far, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
