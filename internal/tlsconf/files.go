package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

var (
	// ErrIncomplete means some but not all of Cert, Key and CA are set.
	ErrIncomplete = errors.New("tlsconf: cert, key and ca must all be set")
	// ErrDisabled means a TLS configuration was asked of empty [Files].
	ErrDisabled = errors.New("tlsconf: tls not configured")
	// ErrNoCACerts means the CA file holds no PEM certificate.
	ErrNoCACerts = errors.New("tlsconf: no certificates in ca file")
)

// Files names the PEM files of one agent's TLS identity. All empty means TLS
// is off; otherwise all three are required.
type Files struct {
	// Cert is the agent's certificate chain, leaf first.
	Cert string
	// Key is the private key of Cert.
	Key string
	// CA holds the certificates that sign peers' certificates.
	CA string
}

// Enabled reports whether any file is set. Call [Files.Validate] to check
// that all of them are.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Validate accepts Files that are all empty or all set.
func (f Files) Validate() error {
	if !f.Enabled() || (f.Cert != "" && f.Key != "" && f.CA != "") {
		return nil
	}
	var missing []string
	for _, p := range []struct{ name, v string }{{"cert", f.Cert}, {"key", f.Key}, {"ca", f.CA}} {
		if p.v == "" {
			missing = append(missing, p.name)
		}
	}
	return fmt.Errorf("%w: missing %v", ErrIncomplete, missing)
}

// Server returns the configuration of a server that presents Cert and
// accepts only clients with a certificate signed by CA whose identity
// passes peer (see [Expect]; a storage agent expects role compute of its
// cluster). TLS 1.3 is the minimum.
func (f Files) Server(peer Expect) (*tls.Config, error) {
	if err := peer.validate(); err != nil {
		return nil, err
	}
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        pool,
		VerifyConnection: peer.verifyConnection,
	}, nil
}

// Client returns the configuration of a client that presents Cert and
// accepts only servers with a certificate signed by CA, valid for the
// dialled host name, whose identity passes peer (a compute agent expects
// role storage of its cluster and, when gossip told it, the node's name).
// The server name is left to the caller: grpc's credentials.NewTLS and
// tls.Dial take the host of the dialled address. TLS 1.3 is the minimum.
func (f Files) Client(peer Expect) (*tls.Config, error) {
	if err := peer.validate(); err != nil {
		return nil, err
	}
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		RootCAs:          pool,
		VerifyConnection: peer.verifyConnection,
	}, nil
}

// Identity reads the identity of Cert, the agent's own certificate.
func (f Files) Identity() (Identity, error) {
	cert, _, err := f.load()
	if err != nil {
		return Identity{}, err
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return Identity{}, fmt.Errorf("tlsconf: %s: %w", f.Cert, err)
	}
	return IdentityOf(leaf)
}

// load reads the key pair and the CA pool.
func (f Files) load() (tls.Certificate, *x509.CertPool, error) {
	if !f.Enabled() {
		return tls.Certificate{}, nil, ErrDisabled
	}
	if err := f.Validate(); err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tlsconf: key pair %s, %s: %w", f.Cert, f.Key, err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tlsconf: ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("%w: %s", ErrNoCACerts, f.CA)
	}
	return cert, pool, nil
}
