// Package instance builds cluster planning instances for the policy command
// and for the policy package's tests and benchmarks: a synthetic profile, a
// cluster of storage and compute nodes, and a placement (ranks dealt in turn,
// replicas by rendezvous hashing), all deterministic in a seed.
package instance

import (
	"fmt"

	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/synthetic"
	"github.com/sophon-dl/sophon/profiler"
)

// Spec describes an instance.
type Spec struct {
	// Kind is the synthetic profile's kind (synthetic.Profile);
	// Samples its size; Cut gives it the JPEG cut's measurements.
	Kind    string
	Samples int
	Cut     bool
	Seed    uint64
	// Storage and Compute are the node counts, RanksPerNode the ranks of
	// every compute node, Replicas the size of every replica set.
	Storage, Compute, RanksPerNode, Replicas int
	// Every storage node has StorageCores and EgressBytesPerSec, except
	// that storage node 0's egress is FastEgress times that (0 means 1).
	StorageCores, EgressBytesPerSec, FastEgress float64
	// Every compute node has these.
	ComputeCores, IngressBytesPerSec, GPUSamplesPerSec float64
	// SharedUplinkBytesPerSec caps all the traffic together (0: none).
	SharedUplinkBytesPerSec float64
}

// Scale is the scale instance: ImageNet's 1,281,167 training
// samples (ImageNet-like, with the cut's measurements), 8 storage agents
// with 16 cores and 10 Gbit/s of egress each but one with 40 Gbit/s, every
// sample on 2 of them, and 8 compute nodes of 8 ranks (64 in all), each
// with 64 cores, 25 Gbit/s of ingress and GPUs consuming 40,000 samples/s
// (5,000 per rank).
func Scale() Spec {
	return Spec{
		Kind: "imagenet-like", Samples: 1_281_167, Cut: true, Seed: 11,
		Storage: 8, Compute: 8, RanksPerNode: 8, Replicas: 2,
		StorageCores: 16, EgressBytesPerSec: 10e9 / 8, FastEgress: 4,
		ComputeCores: 64, IngressBytesPerSec: 25e9 / 8, GPUSamplesPerSec: 40000,
	}
}

// Cluster returns the spec's cluster: storage nodes s0..s{N-1}, compute
// nodes c0..c{M-1}.
func (s Spec) Cluster() policy.Cluster {
	c := policy.Cluster{SharedUplinkBytesPerSec: s.SharedUplinkBytesPerSec}
	for j := range s.Storage {
		e := s.EgressBytesPerSec
		if j == 0 && s.FastEgress > 0 {
			e *= s.FastEgress
		}
		c.Storage = append(c.Storage, policy.StorageNode{Name: fmt.Sprintf("s%d", j), Cores: s.StorageCores, EgressBytesPerSec: e})
	}
	for k := range s.Compute {
		c.Compute = append(c.Compute, policy.ComputeNode{Name: fmt.Sprintf("c%d", k), Cores: s.ComputeCores,
			IngressBytesPerSec: s.IngressBytesPerSec, GPUSamplesPerSec: s.GPUSamplesPerSec, Ranks: s.RanksPerNode})
	}
	return c
}

// Profile returns the spec's synthetic profile.
func (s Spec) Profile() *profiler.Profile {
	if s.Cut {
		return synthetic.ProfileCut(s.Kind, s.Samples, s.Seed)
	}
	return synthetic.Profile(s.Kind, s.Samples, s.Seed)
}

// Placement deals n samples' ranks in turn over c's ranks and gives each
// sample the replicas the agents' rendezvous hashing picks among c's
// storage nodes, by name (ReplicaSet with seed).
func Placement(n int, c policy.Cluster, replicas int, seed uint64) (*policy.Placement, error) {
	if replicas < 1 || replicas > len(c.Storage) {
		return nil, fmt.Errorf("instance: %d replicas over %d storage nodes", replicas, len(c.Storage))
	}
	names := make([]string, len(c.Storage))
	for j, s := range c.Storage {
		names[j] = s.Name
	}
	var buf []int16
	return policy.NewPlacement(Ranks(n, c.Ranks()), func(i int) []int16 {
		buf = ReplicaSet(buf, uint64(i), names, replicas, seed)
		return buf
	})
}

// Replicated deals n samples' ranks in turn over c's ranks and puts every
// sample on every storage node, in c's order: replicated data, as a
// compute agent over replicated storage agents plans it.
func Replicated(n int, c policy.Cluster) (*policy.Placement, error) {
	all := make([]int16, len(c.Storage))
	for j := range all {
		all[j] = int16(j)
	}
	return policy.NewPlacement(Ranks(n, c.Ranks()), func(int) []int16 { return all })
}

// Build returns the spec's profile, cluster and placement.
func (s Spec) Build() (*profiler.Profile, policy.Cluster, *policy.Placement, error) {
	p := s.Profile()
	c := s.Cluster()
	pl, err := Placement(len(p.Samples), c, s.Replicas, s.Seed)
	return p, c, pl, err
}
