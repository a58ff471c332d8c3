package computeagent

import (
	"context"
	"fmt"

	"github.com/sophon-dl/sophon/internal/membership"
)

// gossip is the agent's gossip set-up, shared with the storage agent.
func (c *Config) gossip() membership.Gossip {
	return membership.Gossip{
		Bind:      c.Gossip,
		Advertise: c.GossipAdvertise,
		Join:      c.Join,
		Key:       c.GossipKey,
		KeyFile:   c.GossipKeyFile,
	}
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
