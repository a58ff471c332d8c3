package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// DefaultValidity is how long issued certificates stay valid when no
// validity is given.
const DefaultValidity = 365 * 24 * time.Hour

// caValidity is how long a CA made by [NewCA] stays valid: long enough to
// outlive the certificates it signs.
const caValidity = 10 * 365 * 24 * time.Hour

// skew backdates certificates to tolerate clock skew between nodes.
const skew = time.Hour

// The file names of a CA in its folder.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// ErrNoCA means a folder holds no complete CA (certificate and key).
var ErrNoCA = errors.New("tlsconf: no ca")

// CA is a certificate authority that signs agents' certificates (ECDSA
// P-256). Meant for development clusters, the testbed and tests; real
// deployments bring their own PKI and only need [Files].
type CA struct {
	// File is the PEM file of the CA's certificate, the CA of every [Files]
	// it issues.
	File string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA creates a CA called name and writes its certificate and key into
// dir (ca.pem, and ca-key.pem with mode 0600).
func NewCA(dir, name string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tlsconf: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: %w", err)
	}
	now := time.Now().Add(-skew)
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now,
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, cert, err := sign(tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: %w", err)
	}
	ca := &CA{File: filepath.Join(dir, CAFile), cert: cert, key: key}
	if err := writePEM(filepath.Join(dir, CAKeyFile), "PRIVATE KEY", keyDER, 0o600); err != nil {
		return nil, err
	}
	if err := writePEM(ca.File, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadCA reads the CA that [NewCA] wrote into dir. A missing file is
// [ErrNoCA].
func LoadCA(dir string) (*CA, error) {
	certFile, keyFile := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	for _, f := range []string{certFile, keyFile} {
		if _, err := os.Stat(f); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s missing", ErrNoCA, f)
		}
	}
	pair, err := tlsKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	key, ok := pair.key.(*ecdsa.PrivateKey)
	if !ok || !pair.cert.IsCA {
		return nil, fmt.Errorf("%w: %s is not an ECDSA CA", ErrNoCA, certFile)
	}
	return &CA{File: certFile, cert: pair.cert, key: key}, nil
}

// Leaf describes a certificate for [CA.Issue].
type Leaf struct {
	// Identity is written as the URI SAN. It must be valid unless Raw.
	Identity Identity
	// Raw issues Identity as it is, valid or not; tests use it.
	Raw bool
	// Hosts are the DNS names and IP addresses the certificate is valid
	// for; clients dialling a server check its host against them.
	Hosts []string
	// File is the base name of the files: File.pem and File-key.pem. Empty
	// means "<role>-<name>".
	File string
	// NotBefore and NotAfter bound the validity. Zero NotBefore means an
	// hour ago; zero NotAfter means NotBefore plus [DefaultValidity].
	NotBefore, NotAfter time.Time
}

// Issue signs a certificate for l and writes it, its key (mode 0600) into
// dir. The returned Files name them and the CA's certificate.
func (ca *CA) Issue(dir string, l Leaf) (Files, error) {
	if !l.Raw {
		if err := l.Identity.Validate(); err != nil {
			return Files{}, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, fmt.Errorf("tlsconf: %w", err)
	}
	if l.File == "" {
		l.File = string(l.Identity.Role) + "-" + l.Identity.Name
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-skew)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = l.NotBefore.Add(DefaultValidity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, fmt.Errorf("tlsconf: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:   pkix.Name{CommonName: l.Identity.Name, OrganizationalUnit: []string{string(l.Identity.Role)}, Organization: []string{l.Identity.Cluster}},
		NotBefore: l.NotBefore,
		NotAfter:  l.NotAfter,
		KeyUsage:  x509.KeyUsageDigitalSignature,
		// Both usages: what an agent may do is its role's business, checked
		// by the identity rule, not by the key usage.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{l.Identity.URI()},
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, _, err := sign(tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Files{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Files{}, fmt.Errorf("tlsconf: %w", err)
	}
	f := Files{
		Cert: filepath.Join(dir, l.File+".pem"),
		Key:  filepath.Join(dir, l.File+"-key.pem"),
		CA:   ca.File,
	}
	if err := writePEM(f.Key, "PRIVATE KEY", keyDER, 0o600); err != nil {
		return Files{}, err
	}
	if err := writePEM(f.Cert, "CERTIFICATE", der, 0o644); err != nil {
		return Files{}, err
	}
	return f, nil
}

// WriteTestPKI writes a fresh CA and a server and a client key pair signed by
// it into dir (ca.pem, ca-key.pem, server.pem, server-key.pem, client.pem,
// client-key.pem; keys mode 0600; ECDSA P-256, valid for a year). The server
// is storage agent "storage" and the client compute agent "compute", both of
// [DefaultCluster]. The server certificate is valid for hosts, each a DNS
// name or an IP address; empty hosts means localhost, 127.0.0.1 and ::1.
// Meant for tests; see [CA] for more kinds of certificate.
func WriteTestPKI(dir string, hosts []string) (server, client Files, err error) {
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	ca, err := NewCA(dir, "sophon test CA")
	if err != nil {
		return Files{}, Files{}, err
	}
	if server, err = ca.Issue(dir, Leaf{Identity: Identity{DefaultCluster, RoleStorage, "storage"}, Hosts: hosts, File: "server"}); err != nil {
		return Files{}, Files{}, err
	}
	if client, err = ca.Issue(dir, Leaf{Identity: Identity{DefaultCluster, RoleCompute, "compute"}, File: "client"}); err != nil {
		return Files{}, Files{}, err
	}
	return server, client, nil
}

// sign issues tmpl, signed by parent's key, with a random serial number.
func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, priv *ecdsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: sign %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: %w", err)
	}
	return der, cert, nil
}

// keyPair is a parsed certificate and its private key.
type keyPair struct {
	cert *x509.Certificate
	key  any
}

// tlsKeyPair reads a PEM certificate and its PKCS #8 key.
func tlsKeyPair(certFile, keyFile string) (keyPair, error) {
	read := func(path, typ string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: %w", err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil || blk.Type != typ {
			return nil, fmt.Errorf("tlsconf: %s: no %s PEM block", path, typ)
		}
		return blk.Bytes, nil
	}
	cd, err := read(certFile, "CERTIFICATE")
	if err != nil {
		return keyPair{}, err
	}
	kd, err := read(keyFile, "PRIVATE KEY")
	if err != nil {
		return keyPair{}, err
	}
	cert, err := x509.ParseCertificate(cd)
	if err != nil {
		return keyPair{}, fmt.Errorf("tlsconf: %s: %w", certFile, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kd)
	if err != nil {
		return keyPair{}, fmt.Errorf("tlsconf: %s: %w", keyFile, err)
	}
	return keyPair{cert, key}, nil
}

// writePEM writes one PEM block to path, replacing it atomically.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// writeFile writes b to path with mode through a temporary file and a
// rename, so a key is never readable with a wider mode, even briefly.
func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("tlsconf: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("tlsconf: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	return nil
}
