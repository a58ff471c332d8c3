package membership

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/peerlog"
)

// DefaultPort is memberlist's customary gossip port, used by
// [DefaultConfig].
const DefaultPort = 7946

// Config configures a [Node].
type Config struct {
	// Name is the node's name, unique in the cluster. Empty means
	// "hostname-pid".
	Name string
	// Bind is the gossip host:port, UDP and TCP ("127.0.0.1:0" picks a free
	// port, an empty host means every interface). Empty means
	// "0.0.0.0:7946". Ignored when Transport is set.
	Bind string
	// Advertise is the host:port announced to peers. Empty means the address
	// memberlist derives from Bind.
	Advertise string
	// Join lists host:port peers to join. Empty starts a new cluster;
	// otherwise [New] fails with [ErrNoPeerJoined] unless at least one of
	// them answers.
	Join []string
	// Meta is announced to every peer; see [Meta].
	Meta Meta
	// SecretKey enables memberlist's AES-GCM gossip encryption when 16, 24 or
	// 32 bytes long (see [ParseSecretKey]); every node of the cluster needs
	// the same key. Nil is refused unless Insecure.
	SecretKey []byte
	// Label is memberlist's cluster label: every packet and stream carries
	// it, and a node drops what carries another (or none), so two clusters
	// on one network, or a node of another, cannot mix. At most 255 bytes.
	// Empty is refused unless Insecure.
	Label string
	// Insecure allows gossip without SecretKey or Label: anyone who can
	// reach the port can then join the cluster and announce a storage
	// agent. For tests and a first try-out only.
	Insecure bool
	// Transport replaces memberlist's NetTransport on Bind. Tests pass a
	// transport from a [memberlist.MockNetwork]. Nil means a NetTransport.
	Transport memberlist.Transport
	// Tune, when set, adjusts memberlist's configuration after the LAN
	// defaults and this package's settings are applied. It is meant for tests
	// (see [FastTiming]) and special deployments, e.g. longer timeouts on a
	// very slow link; shortening the LAN timing on a shaped link brings back
	// the false suspicions the LAN preset avoids.
	Tune func(*memberlist.Config)
	// Logger receives memberlist's own log at debug level and this package's
	// warnings. The zero value writes nothing.
	Logger zerolog.Logger
	// Warnings rate-limits and counts the warnings about rejected gossip
	// (see [peerlog.GossipRejected]), which anyone who reaches the gossip
	// port can cause per packet. Nil means a limiter of this node's own
	// with the defaults, whose counters no registry shows.
	Warnings *peerlog.Limiter
}

// DefaultConfig returns a Config binding every interface on [DefaultPort];
// the caller fills in Meta and Join.
func DefaultConfig() Config {
	return Config{
		Bind:   net.JoinHostPort("0.0.0.0", strconv.Itoa(DefaultPort)),
		Logger: zerolog.Nop(),
	}
}

// FastTiming is a [Config.Tune] for in-process clusters in tests: probes,
// gossip and push-pull run tens of times faster than the LAN preset, so joins,
// leaves and meta updates propagate in milliseconds. Never use it on a real
// network.
func FastTiming(c *memberlist.Config) {
	c.ProbeInterval = 50 * time.Millisecond
	c.ProbeTimeout = 25 * time.Millisecond
	c.GossipInterval = 10 * time.Millisecond
	c.PushPullInterval = 200 * time.Millisecond
	c.GossipToTheDeadTime = 200 * time.Millisecond
	c.TCPTimeout = 2 * time.Second
	c.SuspicionMult = 2
}

// withDefaults validates c and fills in the zero fields.
func (c Config) withDefaults() (Config, []byte, error) {
	if c.Name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "node"
		}
		c.Name = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Bind == "" {
		c.Bind = DefaultConfig().Bind
	}
	if c.Transport == nil {
		if _, _, err := splitHostPort(c.Bind); err != nil {
			return c, nil, fmt.Errorf("%w: bind %q: %v", ErrBadConfig, c.Bind, err)
		}
	}
	if c.Advertise != "" {
		if _, _, err := splitHostPort(c.Advertise); err != nil {
			return c, nil, fmt.Errorf("%w: advertise %q: %v", ErrBadConfig, c.Advertise, err)
		}
	}
	for _, j := range c.Join {
		if j == "" {
			return c, nil, fmt.Errorf("%w: empty join address", ErrBadConfig)
		}
	}
	if c.SecretKey != nil {
		if err := checkKeyLen(len(c.SecretKey)); err != nil {
			return c, nil, err
		}
	}
	if len(c.Label) > 255 {
		return c, nil, fmt.Errorf("%w: label is %d bytes, at most 255", ErrBadConfig, len(c.Label))
	}
	if !c.Insecure && (c.SecretKey == nil || c.Label == "") {
		return c, nil, fmt.Errorf("%w: gossip needs a secret key and a cluster label (or Insecure)", ErrInsecure)
	}
	meta, err := c.Meta.encode()
	if err != nil {
		return c, nil, err
	}
	return c, meta, nil
}

// memberlistConfig builds memberlist's configuration from a validated c.
func (c Config) memberlistConfig() *memberlist.Config {
	// NB: the LAN preset, not DefaultLocalConfig: the local preset's short
	// probe timeouts make nodes on a shaped 500 Mbit/s link, kept full by the
	// data plane, falsely suspect each other.
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.Name
	if c.Transport != nil {
		mc.Transport = c.Transport
	} else {
		host, port, _ := splitHostPort(c.Bind)
		if host == "" {
			host = "0.0.0.0"
		}
		mc.BindAddr, mc.BindPort = host, port
		mc.AdvertisePort = port
	}
	if c.Advertise != "" {
		host, port, _ := splitHostPort(c.Advertise)
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	if c.SecretKey != nil {
		mc.SecretKey = append([]byte(nil), c.SecretKey...)
	}
	mc.Label = c.Label
	mc.Logger = newStdLogger(c.Logger, c.Warnings)
	if c.Tune != nil {
		c.Tune(mc)
	}
	return mc
}

// splitHostPort parses host:port with a numeric port.
func splitHostPort(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}
