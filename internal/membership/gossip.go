package membership

import (
	"fmt"
	"os"

	"github.com/rs/zerolog"
)

// DefaultCluster is the cluster name, and so the gossip label, when none is
// given. It matches tlsconf.DefaultCluster.
const DefaultCluster = "sophon"

// Gossip is the gossip set-up both agents share: where to bind, whom to
// join and the key that encrypts gossip. An agent checks it in its New with
// [Gossip.Check] and builds its node's [Config] with [Gossip.Config], so
// storage and compute agents are secured the same way: encrypted with the
// cluster's key and labelled with the cluster's name, unless insecure.
//
// The cluster's name and the insecure switch are not here: they also
// govern an agent's TLS (the cluster peers' certificates must name, and
// plaintext gRPC), so each agent's Config holds them once, beside Gossip
// and its TLS files, and passes them to Check and Config. The test hooks
// (Transport, Tune) are on [Config] only.
type Gossip struct {
	// Bind is the memberlist bind host:port; see [Config.Bind]. What an
	// empty Bind means is the agent's: a storage agent then runs without
	// membership.
	Bind string
	// Advertise is the host:port announced to peers; see [Config.Advertise].
	// Empty means memberlist's choice from Bind.
	Advertise string
	// Join lists peers to join; see [Config.Join]. Empty starts a new
	// cluster.
	Join []string
	// Key is the gossip encryption key in text form (see [ParseSecretKey]).
	Key string
	// KeyFile names a file holding the key in text form (make certs writes
	// one). At most one of Key and KeyFile may be set; one is required
	// unless insecure. Both empty means no key.
	KeyFile string
}

// Check validates g without reading KeyFile: a key must be given unless
// insecure, and a key given must parse. Its errors wrap [ErrInsecure],
// [ErrBadSecretKey] or [ErrBadConfig] and say how to fix them.
func (g Gossip) Check(insecure bool) error {
	if g.Key != "" && g.KeyFile != "" {
		return fmt.Errorf("%w: both a gossip key and a gossip key file", ErrBadConfig)
	}
	if g.Key != "" {
		if _, err := ParseSecretKey(g.Key); err != nil {
			return err
		}
	}
	if g.Key == "" && g.KeyFile == "" && !insecure {
		return fmt.Errorf("%w: gossip needs a key: pass --gossip-key-file (make certs, or the certs subcommand, writes one) or --gossip-key, or --insecure", ErrInsecure)
	}
	return nil
}

// SecretKey reads the key from Key or KeyFile; nil when neither is set.
func (g Gossip) SecretKey() ([]byte, error) {
	if err := g.Check(true); err != nil {
		return nil, err
	}
	text := g.Key
	if g.KeyFile != "" {
		b, err := os.ReadFile(g.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: gossip key file: %v", ErrBadConfig, err)
		}
		if text = string(b); text == "" {
			return nil, fmt.Errorf("%w: gossip key file %s is empty", ErrBadSecretKey, g.KeyFile)
		}
	}
	if text == "" {
		return nil, nil
	}
	key, err := ParseSecretKey(text)
	if err != nil {
		return nil, fmt.Errorf("gossip key file %s: %w", g.KeyFile, err)
	}
	return key, nil
}

// Config is the [Config] of a node called name announcing meta in the
// cluster named cluster, whose name is the gossip label (empty means
// DefaultCluster). insecure allows gossip without a key (a key given is
// still used). Transport and Tune are left nil for the caller (tests) to
// set.
func (g Gossip) Config(cluster, name string, meta Meta, insecure bool, log zerolog.Logger) (Config, error) {
	if err := g.Check(insecure); err != nil {
		return Config{}, err
	}
	key, err := g.SecretKey()
	if err != nil {
		return Config{}, err
	}
	if cluster == "" {
		cluster = DefaultCluster
	}
	return Config{
		Name:      name,
		Bind:      g.Bind,
		Advertise: g.Advertise,
		Join:      g.Join,
		Meta:      meta,
		SecretKey: key,
		Label:     cluster,
		Insecure:  insecure,
		Logger:    log,
	}, nil
}
