package testbed

import (
	"fmt"
	"strconv"

	"github.com/sophon-dl/sophon/internal/tlsconf"
)

// Node names and cluster of the agents the testbed starts: StorageNode and
// ComputeNode are the first of each role (StorageName(0), ComputeName(0)).
const (
	StorageNode = "storage-1"
	ComputeNode = "compute-1"
	Cluster     = tlsconf.DefaultCluster
)

// StorageName is the name of storage agent i (from 0): "storage-<i+1>".
func StorageName(i int) string { return "storage-" + strconv.Itoa(i+1) }

// ComputeName is the name of compute agent i (from 0): "compute-<i+1>".
func ComputeName(i int) string { return "compute-" + strconv.Itoa(i+1) }

// AgentCerts makes a fresh development CA in dir, a certificate for storage
// agent StorageNode valid for hosts (plus localhost and loopback) and one
// for compute agent ComputeNode, and a gossip key. It returns the flags that
// give each agent its TLS identity and the gossip key, so the testbed runs
// the agents as deployed: mutual TLS, encrypted and labelled gossip.
func AgentCerts(dir string, hosts ...string) (storageFlags, computeFlags []string, err error) {
	s, c, err := ClusterCerts(dir, 1, 1, hosts...)
	if err != nil {
		return nil, nil, err
	}
	return s[0], c[0], nil
}

// ClusterCerts is AgentCerts for storage storage agents and compute compute
// agents, named StorageName(i) and ComputeName(i): storageFlags[i] and
// computeFlags[i] are agent i's flags, its --name included. Every storage
// certificate is valid for all of hosts.
func ClusterCerts(dir string, storage, compute int, hosts ...string) (storageFlags, computeFlags [][]string, err error) {
	if storage < 1 || compute < 1 {
		return nil, nil, fmt.Errorf("testbed: certificates for %d storage and %d compute agents", storage, compute)
	}
	hosts = append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
	o := tlsconf.DevCerts{Dir: dir, Cluster: Cluster, Hosts: hosts}
	for i := range storage {
		o.Storage = append(o.Storage, StorageName(i))
	}
	for i := range compute {
		o.Compute = append(o.Compute, ComputeName(i))
	}
	certs, err := tlsconf.WriteDevCerts(o)
	if err != nil {
		return nil, nil, fmt.Errorf("testbed: certificates: %w", err)
	}
	flags := func(f tlsconf.Files) []string {
		return []string{"--cluster", Cluster, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA, "--gossip-key-file", certs.GossipKey}
	}
	for _, n := range o.Storage {
		storageFlags = append(storageFlags, append(flags(certs.Storage[n]), "--name", n))
	}
	for _, n := range o.Compute {
		computeFlags = append(computeFlags, append(flags(certs.Compute[n]), "--name", n))
	}
	return storageFlags, computeFlags, nil
}
