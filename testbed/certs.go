package testbed

import (
	"fmt"

	"github.com/sophon-dl/sophon/internal/tlsconf"
)

// Node names and cluster of the agents the testbed starts.
const (
	StorageNode = "storage-1"
	ComputeNode = "compute-1"
	Cluster     = tlsconf.DefaultCluster
)

// AgentCerts makes a fresh development CA in dir, a certificate for storage
// agent StorageNode valid for hosts (plus localhost and loopback) and one
// for compute agent ComputeNode, and a gossip key. It returns the flags that
// give each agent its TLS identity and the gossip key, so the testbed runs
// the agents as deployed: mutual TLS, encrypted and labelled gossip.
func AgentCerts(dir string, hosts ...string) (storageFlags, computeFlags []string, err error) {
	hosts = append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
	certs, err := tlsconf.WriteDevCerts(tlsconf.DevCerts{
		Dir: dir, Cluster: Cluster, Storage: []string{StorageNode}, Compute: []string{ComputeNode}, Hosts: hosts,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("testbed: certificates: %w", err)
	}
	flags := func(f tlsconf.Files) []string {
		return []string{"--cluster", Cluster, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA, "--gossip-key-file", certs.GossipKey}
	}
	storageFlags = append(flags(certs.Storage[StorageNode]), "--name", StorageNode)
	computeFlags = append(flags(certs.Compute[ComputeNode]), "--name", ComputeNode)
	return storageFlags, computeFlags, nil
}
