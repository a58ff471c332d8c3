package cli

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/sophon-dl/sophon/internal/membership"
	"github.com/sophon-dl/sophon/internal/tlsconf"
)

// Common are the settings both agents take from the same flags and config
// file keys: the config file itself, the node's name, gossip, TLS, metrics
// and logging. An agent's settings embed it (`yaml:",inline"`) and call
// [Common.Register] once, so a flag is declared, named and documented in
// one place.
type Common struct {
	Config          string `yaml:"-"`
	Name            string `yaml:"name"`
	Cluster         string `yaml:"cluster"`
	Gossip          string `yaml:"gossip"`
	GossipAdvertise string `yaml:"gossip-advertise"`
	Join            List   `yaml:"join"`
	GossipKey       string `yaml:"gossip-key"`
	GossipKeyFile   string `yaml:"gossip-key-file"`
	Insecure        bool   `yaml:"insecure"`
	Metrics         string `yaml:"metrics"`
	TLSCert         string `yaml:"tls-cert"`
	TLSKey          string `yaml:"tls-key"`
	TLSCA           string `yaml:"tls-ca"`
	LogLevel        string `yaml:"log-level"`
	LogFormat       string `yaml:"log-format"`
	CPUProfile      string `yaml:"cpu-profile"`
}

// Role says what differs between the agents' common flags: their help.
type Role struct {
	// Self is this agent's role in certificates ("storage" or "compute"),
	// Peer the role of the agents it talks to.
	Self, Peer tlsconf.Role
	// Insecure is what --insecure turns off, for its help.
	Insecure string
	// Gossip is what --gossip is for, for its help.
	Gossip string
	// Name ends --name's help: its default, and what it must match.
	Name string
}

// StorageRole and ComputeRole are the two agents' roles.
var (
	StorageRole = Role{Self: tlsconf.RoleStorage, Peer: tlsconf.RoleCompute,
		Insecure: "serve plaintext gRPC to anyone who reaches it and gossip without a key; the gRPC listener then defaults to loopback (127.0.0.1:7070) unless --listen names an address",
		Gossip:   "empty disables membership",
		Name:     "; must match the certificate's (default: the certificate's, else hostname)"}
	ComputeRole = Role{Self: tlsconf.RoleCompute, Peer: tlsconf.RoleStorage,
		Insecure: "dial storage agents in plaintext and gossip without a key",
		Gossip:   "to discover storage agents by gossip",
		Name:     " (default: hostname-pid)"}
)

// DefaultCommon are the common settings' defaults.
func DefaultCommon() Common {
	return Common{Cluster: tlsconf.DefaultCluster, LogLevel: "info", LogFormat: "auto"}
}

// Register declares the common flags on fs, writing into c.
func (c *Common) Register(fs *flag.FlagSet, r Role) {
	fs.StringVar(&c.Config, "config", c.Config, "YAML config `file` with the same keys as these flags; flags override it")
	fs.StringVar(&c.Name, "name", c.Name, "node `name` in the cluster"+r.Name)
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "cluster `name`: the gossip label, and the cluster the "+string(r.Peer)+" agents' certificates must name")
	fs.StringVar(&c.Gossip, "gossip", c.Gossip, "memberlist bind `host:port` (UDP and TCP); "+r.Gossip)
	fs.StringVar(&c.GossipAdvertise, "gossip-advertise", c.GossipAdvertise, "gossip `host:port` announced to peers (default: derived from --gossip)")
	fs.Var(&c.Join, "join", "gossip `peers` to join, comma-separated host:port")
	fs.StringVar(&c.GossipKey, "gossip-key", c.GossipKey, "gossip encryption `key`, base64 or hex, 16/24/32 bytes; with --gossip, it or --gossip-key-file is required unless --insecure")
	fs.StringVar(&c.GossipKeyFile, "gossip-key-file", c.GossipKeyFile, "`file` holding the gossip key (make certs writes one)")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, r.Insecure+" (tests and first try-outs only; logs a warning)")
	fs.StringVar(&c.Metrics, "metrics", c.Metrics, "serve Prometheus /metrics and /healthz on `host:port` (default: off)")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate `file` for mutual TLS, naming sophon://CLUSTER/"+string(r.Self)+"/NAME (with --tls-key and --tls-ca; required unless --insecure)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key `file` of --tls-cert")
	fs.StringVar(&c.TLSCA, "tls-ca", c.TLSCA, "PEM CA `file` that signs the "+string(r.Peer)+" agents' certificates")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log `level`: debug, info, warn or error")
	fs.StringVar(&c.CPUProfile, "cpu-profile", c.CPUProfile, "write a Go CPU profile of the whole run to `file` (go tool pprof reads it), for finding where the agent's CPU goes beyond its ops; written when the agent stops")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log `format`: console, json, or auto (console on a terminal)")
}

// GossipSettings are the gossip settings of c. The cluster's name and
// --insecure, which govern TLS too, are c.Cluster and c.Insecure.
func (c Common) GossipSettings() membership.Gossip {
	return membership.Gossip{
		Bind:      c.Gossip,
		Advertise: c.GossipAdvertise,
		Join:      c.Join,
		Key:       c.GossipKey,
		KeyFile:   c.GossipKeyFile,
	}
}

// TLSFiles are the TLS files of c.
func (c Common) TLSFiles() tlsconf.Files {
	return tlsconf.Files{Cert: c.TLSCert, Key: c.TLSKey, CA: c.TLSCA}
}

// StartCPUProfile starts the CPU profile --cpu-profile asks for, if it
// does; stop ends it and closes the file (call it when the agent stops).
func (c Common) StartCPUProfile() (stop func(), err error) {
	if c.CPUProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(c.CPUProfile)
	if err != nil {
		return nil, fmt.Errorf("cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu-profile %s: %w", c.CPUProfile, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
