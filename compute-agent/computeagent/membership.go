package computeagent

import (
	"context"
	"fmt"

	"github.com/sophon-dl/sophon/internal/cpuquota"
	"github.com/sophon-dl/sophon/internal/membership"
)

// join starts this agent's membership, announcing the compute role.
func (a *Agent) join() (*membership.Node, error) {
	// The cores it may use: its cgroup's quota and CPUs (its container's
	// limit), else the machine's.
	cores, _, _ := cpuquota.Cores(0)
	mc, err := a.cfg.Gossip.Config(a.cfg.Cluster, a.cfg.Name, membership.Meta{
		Role:    membership.RoleCompute,
		Cores:   cores,
		Version: a.cfg.Version,
	}, a.cfg.Insecure, a.log)
	if err != nil {
		return nil, fmt.Errorf("computeagent: join cluster: %w", err)
	}
	mc.Transport, mc.Tune, mc.Warnings = a.cfg.Knobs.GossipTransport, a.cfg.Knobs.GossipTune, a.peer
	node, err := membership.New(mc)
	if err != nil {
		return nil, fmt.Errorf("computeagent: join cluster: %w", err)
	}
	return node, nil
}

// MembershipDiscovery finds the storage agents through gossip: the alive
// members announcing the storage role and a gRPC address.
type MembershipDiscovery struct {
	Node *membership.Node
	// Min is how many storage agents to wait for before an epoch starts.
	// Zero means 1.
	Min int
}

// Storage implements [Discovery]. It blocks until Min storage agents are
// alive or ctx ends.
func (d MembershipDiscovery) Storage(ctx context.Context) ([]Endpoint, error) {
	want := max(d.Min, 1)
	members, err := d.Node.WaitFor(ctx, membership.RoleStorage, want)
	if err != nil {
		return nil, fmt.Errorf("waiting for %d storage agents: %w", want, err)
	}
	eps := make([]Endpoint, 0, len(members))
	for _, m := range members {
		if m.Meta.GRPCAddr == "" {
			continue
		}
		eps = append(eps, Endpoint{Name: m.Name, Addr: m.Meta.GRPCAddr, Fingerprint: m.Meta.Fingerprint, Member: m.Name})
	}
	return eps, nil
}
