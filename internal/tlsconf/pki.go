package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// testPKIValidity is how long WriteTestPKI's certificates stay valid.
const testPKIValidity = 365 * 24 * time.Hour

// WriteTestPKI writes a fresh CA and a server and a client key pair signed by
// it into dir (ca.pem, server.pem, server-key.pem, client.pem,
// client-key.pem; keys mode 0600; ECDSA P-256, valid for a year). The server
// certificate is valid for hosts, each a DNS name or an IP address; empty
// hosts means localhost, 127.0.0.1 and ::1. The CA's private key is not kept,
// so nothing more can be signed by it. Meant for tests and a first try-out.
func WriteTestPKI(dir string, hosts []string) (server, client Files, err error) {
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, Files{}, fmt.Errorf("tlsconf: %w", err)
	}
	now := time.Now().Add(-time.Hour) // tolerate clock skew between nodes
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, Files{}, fmt.Errorf("tlsconf: %w", err)
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "sophon test CA"},
		NotBefore:             now,
		NotAfter:              now.Add(testPKIValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, caCert, err := sign(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Files{}, Files{}, err
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := writePEM(ca, "CERTIFICATE", caDER, 0o644); err != nil {
		return Files{}, Files{}, err
	}

	leaf := func(name, cn string, usage x509.ExtKeyUsage, hosts []string) (Files, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return Files{}, fmt.Errorf("tlsconf: %w", err)
		}
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn},
			NotBefore:   now,
			NotAfter:    now.Add(testPKIValidity),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, _, err := sign(tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return Files{}, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return Files{}, fmt.Errorf("tlsconf: %w", err)
		}
		f := Files{
			Cert: filepath.Join(dir, name+".pem"),
			Key:  filepath.Join(dir, name+"-key.pem"),
			CA:   ca,
		}
		if err := writePEM(f.Cert, "CERTIFICATE", der, 0o644); err != nil {
			return Files{}, err
		}
		if err := writePEM(f.Key, "PRIVATE KEY", keyDER, 0o600); err != nil {
			return Files{}, err
		}
		return f, nil
	}
	if server, err = leaf("server", "sophon storage agent", x509.ExtKeyUsageServerAuth, hosts); err != nil {
		return Files{}, Files{}, err
	}
	if client, err = leaf("client", "sophon compute agent", x509.ExtKeyUsageClientAuth, nil); err != nil {
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

// writePEM writes one PEM block to path.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, mode); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	// NB: WriteFile keeps the mode of a file that already exists.
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("tlsconf: %w", err)
	}
	return nil
}
