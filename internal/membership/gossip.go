package membership

import (
	"fmt"
	"os"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"
)

// DefaultCluster is the cluster name, and so the gossip label, when none is
// given. It matches tlsconf.DefaultCluster.
const DefaultCluster = "sophon"

// Gossip is the gossip set-up both agents share: where to bind, whom to
// join, and how gossip is protected. An agent checks it in its New with
// [Gossip.Check] and joins with [Gossip.Start], so storage and compute
// agents are secured the same way: encrypted with the cluster's key and
// labelled with the cluster's name, unless Insecure.
type Gossip struct {
	// Bind is the memberlist bind host:port; see [Config.Bind].
	Bind string
	// Advertise is the host:port announced to peers; see [Config.Advertise].
	Advertise string
	// Join lists peers to join; see [Config.Join].
	Join []string
	// Cluster names the cluster; it is the gossip label. Empty means
	// DefaultCluster.
	Cluster string
	// Key is the gossip encryption key in text form (see [ParseSecretKey]).
	Key string
	// KeyFile names a file holding the key in text form (make certs writes
	// one). At most one of Key and KeyFile may be set; one is required
	// unless Insecure.
	KeyFile string
	// Insecure allows gossip without a key (a key given is still used). The
	// label is set either way.
	Insecure bool
	// Transport replaces memberlist's NetTransport (tests). Nil means UDP and
	// TCP on Bind.
	Transport memberlist.Transport
	// Tune adjusts memberlist's configuration (tests pass [FastTiming]).
	Tune func(*memberlist.Config)
}

// Check validates g without reading KeyFile: a key must be given unless
// Insecure, and a key given must parse. Its errors wrap [ErrInsecure],
// [ErrBadSecretKey] or [ErrBadConfig] and say how to fix them.
func (g Gossip) Check() error {
	if g.Key != "" && g.KeyFile != "" {
		return fmt.Errorf("%w: both a gossip key and a gossip key file", ErrBadConfig)
	}
	if g.Key != "" {
		if _, err := ParseSecretKey(g.Key); err != nil {
			return err
		}
	}
	if g.Key == "" && g.KeyFile == "" && !g.Insecure {
		return fmt.Errorf("%w: gossip needs a key: pass --gossip-key-file (make certs, or the certs subcommand, writes one) or --gossip-key, or --insecure", ErrInsecure)
	}
	return nil
}

// SecretKey reads the key from Key or KeyFile; nil when neither is set.
func (g Gossip) SecretKey() ([]byte, error) {
	if err := g.Check(); err != nil {
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
	key, err := ParseSecretKey(text)
	if err != nil {
		return nil, fmt.Errorf("gossip key file %s: %w", g.KeyFile, err)
	}
	return key, nil
}

// Config is the [Config] of a node called name announcing meta.
func (g Gossip) Config(name string, meta Meta, log zerolog.Logger) (Config, error) {
	key, err := g.SecretKey()
	if err != nil {
		return Config{}, err
	}
	label := g.Cluster
	if label == "" {
		label = DefaultCluster
	}
	return Config{
		Name:      name,
		Bind:      g.Bind,
		Advertise: g.Advertise,
		Join:      g.Join,
		Meta:      meta,
		SecretKey: key,
		Label:     label,
		Insecure:  g.Insecure,
		Transport: g.Transport,
		Tune:      g.Tune,
		Logger:    log,
	}, nil
}

// Start joins the cluster as name announcing meta: [New] with g's
// [Config]. Unencrypted gossip is logged at warn level.
func (g Gossip) Start(name string, meta Meta, log zerolog.Logger) (*Node, error) {
	cfg, err := g.Config(name, meta, log)
	if err != nil {
		return nil, err
	}
	if cfg.SecretKey == nil {
		log.Warn().Str("component", "membership").Str("label", cfg.Label).
			Msg("INSECURE: gossip is not encrypted; anyone who reaches the gossip port can join the cluster")
	}
	return New(cfg)
}
