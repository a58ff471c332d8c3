package tlsconf

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// GossipKeyFile is the name of the gossip key file [WriteDevCerts] writes.
const GossipKeyFile = "gossip.key"

// DevCerts configures [WriteDevCerts].
type DevCerts struct {
	// Dir receives the files. Required.
	Dir string
	// Cluster is written into every certificate. Empty means
	// [DefaultCluster].
	Cluster string
	// Storage and Compute are the node names of the storage and compute
	// agents, one key pair each.
	Storage, Compute []string
	// Hosts are the DNS names and IP addresses every certificate is valid
	// for (the storage agents' addresses as compute agents dial them).
	// Empty means localhost, 127.0.0.1 and ::1.
	Hosts []string
	// Validity is how long the node certificates stay valid. Zero means
	// [DefaultValidity].
	Validity time.Duration
	// NoGossipKey skips the gossip key file.
	NoGossipKey bool
}

// DevFiles is what [WriteDevCerts] wrote.
type DevFiles struct {
	// CA is the CA's certificate; CAKept says it was there already.
	CA     string
	CAKept bool
	// Storage and Compute map node names to their files.
	Storage, Compute map[string]Files
	// GossipKey is the gossip key file ("" with NoGossipKey); GossipKeyKept
	// says it was there already.
	GossipKey     string
	GossipKeyKept bool
}

// WriteDevCerts makes the certificates of a development cluster: a CA
// (ECDSA P-256; ca.pem, ca-key.pem), one key pair per node named
// "<role>-<name>.pem" and "<role>-<name>-key.pem" carrying the URI SAN
// sophon://<cluster>/<role>/<name> and the DNS and IP SANs of Hosts, and a
// random 32-byte gossip key (gossip.key, base64). Keys are mode 0600. It is
// idempotent: a CA and a gossip key already in Dir are kept, so certificates
// issued earlier stay valid and nodes keep their key; node certificates are
// issued anew.
func WriteDevCerts(o DevCerts) (DevFiles, error) {
	if o.Dir == "" {
		return DevFiles{}, fmt.Errorf("%w: no output folder", ErrBadIdentity)
	}
	if o.Cluster == "" {
		o.Cluster = DefaultCluster
	}
	if len(o.Hosts) == 0 {
		o.Hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	if o.Validity == 0 {
		o.Validity = DefaultValidity
	}
	if o.Validity < 0 {
		return DevFiles{}, fmt.Errorf("%w: validity %v", ErrBadIdentity, o.Validity)
	}
	// Check every identity before writing anything.
	for _, n := range o.Storage {
		if err := (Identity{o.Cluster, RoleStorage, n}).Validate(); err != nil {
			return DevFiles{}, err
		}
	}
	for _, n := range o.Compute {
		if err := (Identity{o.Cluster, RoleCompute, n}).Validate(); err != nil {
			return DevFiles{}, err
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return DevFiles{}, fmt.Errorf("tlsconf: %w", err)
	}
	out := DevFiles{Storage: map[string]Files{}, Compute: map[string]Files{}}
	ca, err := LoadCA(o.Dir)
	switch {
	case err == nil:
		out.CAKept = true
	case errors.Is(err, ErrNoCA):
		if ca, err = NewCA(o.Dir, "sophon development CA ("+o.Cluster+")"); err != nil {
			return out, err
		}
	default:
		return out, err
	}
	out.CA = ca.File
	now := time.Now().Add(-skew)
	for _, g := range []struct {
		role  Role
		names []string
		into  map[string]Files
	}{{RoleStorage, o.Storage, out.Storage}, {RoleCompute, o.Compute, out.Compute}} {
		for _, n := range g.names {
			f, err := ca.Issue(o.Dir, Leaf{Identity: Identity{o.Cluster, g.role, n}, Hosts: o.Hosts, NotBefore: now, NotAfter: now.Add(o.Validity)})
			if err != nil {
				return out, err
			}
			g.into[n] = f
		}
	}
	if !o.NoGossipKey {
		out.GossipKey = filepath.Join(o.Dir, GossipKeyFile)
		if _, err := os.Stat(out.GossipKey); err == nil {
			out.GossipKeyKept = true
		} else if out.GossipKey, err = WriteGossipKey(out.GossipKey); err != nil {
			return out, err
		}
	}
	return out, nil
}

// WriteGossipKey writes a random 32-byte gossip key (AES-256), base64, to
// path with mode 0600 and returns path.
func WriteGossipKey(path string) (string, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("tlsconf: %w", err)
	}
	if err := writeFile(path, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		return "", err
	}
	return path, nil
}
