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
// requires a client certificate signed by CA. TLS 1.2 is the minimum.
func (f Files) Server() (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// Client returns the configuration of a client that presents Cert and trusts
// servers signed by CA. serverName is the name the server's certificate must
// carry; empty leaves it to the caller (grpc's credentials.NewTLS and
// tls.Dial take the host of the dialled address).
func (f Files) Client(serverName string) (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   serverName,
	}, nil
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
