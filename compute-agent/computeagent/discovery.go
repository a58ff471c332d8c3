package computeagent

import (
	"context"
	"slices"
)

// Endpoint is one storage agent.
type Endpoint struct {
	// Name identifies the agent in logs and reports; Addr is its gRPC
	// address (host:port).
	Name, Addr string
	// Fingerprint is the dataset fingerprint the agent announced, if any.
	// The agent's Info RPC is checked against the catalog either way.
	Fingerprint string
	// Member is the node name gossip announced for Addr; the storage
	// agent's certificate must name it. Empty (static discovery) accepts
	// any storage agent of the cluster.
	Member string
}

// Discovery finds the storage agents. The agent asks it at the start of
// every epoch, so agents that join between epochs are used.
type Discovery interface {
	Storage(ctx context.Context) ([]Endpoint, error)
}

// StaticDiscovery is a fixed list of storage agents; it skips membership.
type StaticDiscovery []Endpoint

// Storage implements [Discovery].
func (s StaticDiscovery) Storage(context.Context) ([]Endpoint, error) {
	return slices.Clone(s), nil
}

// Static returns a StaticDiscovery of the given addresses, each named by
// its address.
func Static(addrs ...string) StaticDiscovery {
	s := make(StaticDiscovery, len(addrs))
	for i, a := range addrs {
		s[i] = Endpoint{Name: a, Addr: a}
	}
	return s
}
