package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// URIScheme is the scheme of the URI SAN that names an agent:
// sophon://<cluster>/<role>/<node-name>.
const URIScheme = "sophon"

// DefaultCluster is the cluster name when none is given.
const DefaultCluster = "sophon"

// Role is what an agent does in the cluster; its certificate says which.
type Role string

// The roles a certificate can carry.
const (
	RoleStorage Role = "storage"
	RoleCompute Role = "compute"
)

// Errors of the identity check. A rejected handshake's error wraps one of
// them.
var (
	// ErrNoIdentity means the peer's certificate carries no (or more than
	// one) sophon:// URI SAN, or a malformed one.
	ErrNoIdentity = errors.New("tlsconf: certificate names no sophon identity")
	// ErrNotMember means the peer's certificate is of another cluster.
	ErrNotMember = errors.New("tlsconf: peer is not a member of this cluster")
	// ErrWrongRole means the peer's certificate is of the wrong role, e.g. a
	// storage certificate presented by a client.
	ErrWrongRole = errors.New("tlsconf: peer has the wrong role")
	// ErrWrongName means the peer's certificate names another node than the
	// one gossip announced at the dialled address.
	ErrWrongName = errors.New("tlsconf: peer is not the expected node")
	// ErrBadIdentity means an [Identity] to issue or expect is invalid.
	ErrBadIdentity = errors.New("tlsconf: bad identity")
)

// Identity is who an agent is: its cluster, role and node name. A
// certificate carries it as the URI SAN sophon://<cluster>/<role>/<name>.
type Identity struct {
	Cluster string
	Role    Role
	Name    string
}

// URI is the identity's URI SAN.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: URIScheme, Host: id.Cluster, Path: "/" + string(id.Role) + "/" + id.Name}
}

func (id Identity) String() string { return id.URI().String() }

// Validate accepts an identity with a cluster, a known role and a name,
// each a plain label (letters, digits, '-', '_', '.').
func (id Identity) Validate() error {
	if id.Role != RoleStorage && id.Role != RoleCompute {
		return fmt.Errorf("%w: role %q (want storage or compute)", ErrBadIdentity, id.Role)
	}
	for _, p := range []struct{ what, v string }{{"cluster", id.Cluster}, {"name", id.Name}} {
		if !validLabel(p.v) {
			return fmt.Errorf("%w: %s %q (want letters, digits, '-', '_' or '.')", ErrBadIdentity, p.what, p.v)
		}
	}
	return nil
}

func validLabel(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}

// IdentityOf reads the identity a certificate carries: exactly one
// sophon:// URI SAN.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var ids []Identity
	for _, u := range cert.URIs {
		if u.Scheme != URIScheme {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
		if len(parts) != 2 {
			return Identity{}, fmt.Errorf("%w: %s", ErrNoIdentity, u)
		}
		id := Identity{Cluster: u.Host, Role: Role(parts[0]), Name: parts[1]}
		if err := id.Validate(); err != nil {
			return Identity{}, fmt.Errorf("%w: %s: %v", ErrNoIdentity, u, err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 1 {
		return Identity{}, fmt.Errorf("%w (%d sophon URIs; subject %q)", ErrNoIdentity, len(ids), cert.Subject.CommonName)
	}
	return ids[0], nil
}

// Expect is the identity rule for a peer: its certificate must be of
// Cluster and Role and, when Name is set, name that node.
type Expect struct {
	Cluster string
	Role    Role
	// Name is the node the peer must be. Empty accepts any node of the
	// cluster and role.
	Name string
}

// Check tests a peer's identity against the rule.
func (e Expect) Check(id Identity) error {
	switch {
	case id.Cluster != e.Cluster:
		return fmt.Errorf("%w: %s is of cluster %q, want %q", ErrNotMember, id, id.Cluster, e.Cluster)
	case id.Role != e.Role:
		return fmt.Errorf("%w: %s has role %q, want %q", ErrWrongRole, id, id.Role, e.Role)
	case e.Name != "" && id.Name != e.Name:
		return fmt.Errorf("%w: %s, want node %q", ErrWrongName, id, e.Name)
	}
	return nil
}

// validate accepts a rule with a cluster and a known role.
func (e Expect) validate() error {
	if e.Name == "" {
		e.Name = "x"
	}
	return Identity(e).Validate()
}

// verifyConnection is tls.Config.VerifyConnection for the rule: it runs
// after crypto/tls verified the chain (and, on a client, the host name),
// and checks the leaf's identity.
func (e Expect) verifyConnection(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: no peer certificate", ErrNoIdentity)
	}
	id, err := IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return err
	}
	return e.Check(id)
}
