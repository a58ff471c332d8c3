package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFilesValidate(t *testing.T) {
	tests := []struct {
		name    string
		files   Files
		enabled bool
		want    error
	}{
		{"none", Files{}, false, nil},
		{"all", Files{Cert: "c", Key: "k", CA: "a"}, true, nil},
		{"cert only", Files{Cert: "c"}, true, ErrIncomplete},
		{"no ca", Files{Cert: "c", Key: "k"}, true, ErrIncomplete},
		{"ca only", Files{CA: "a"}, true, ErrIncomplete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.files.Enabled(); got != tt.enabled {
				t.Errorf("Enabled: got %v, want %v", got, tt.enabled)
			}
			if got := tt.files.Validate(); !errors.Is(got, tt.want) {
				t.Errorf("Validate: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWriteTestPKI(t *testing.T) {
	dir := t.TempDir()
	server, client, err := WriteTestPKI(dir, []string{"storage.example", "10.1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []Files{server, client} {
		if err := f.Validate(); err != nil || !f.Enabled() {
			t.Errorf("%+v: Validate %v, Enabled %v", f, err, f.Enabled())
		}
		st, err := os.Stat(f.Key)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o600 {
			t.Errorf("%s mode: got %v, want 0600", f.Key, got)
		}
	}
	cert := readCert(t, server.Cert)
	if got, want := strings.Join(cert.DNSNames, ","), "storage.example"; got != want {
		t.Errorf("server DNS names: got %q, want %q", got, want)
	}
	if len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP("10.1.2.3")) {
		t.Errorf("server IPs: got %v, want [10.1.2.3]", cert.IPAddresses)
	}
	if err := cert.VerifyHostname("storage.example"); err != nil {
		t.Errorf("VerifyHostname: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca-key.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the CA key was written: %v", err)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// handshake runs a TLS handshake over a loopback connection and reports each
// side's error. The client also reads once: under TLS 1.3 the server rejects
// a client certificate after the client's handshake has completed.
func handshake(t *testing.T, srv, cli *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		conn, err := ln.Accept()
		if err != nil {
			serverErr = err
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		tc := tls.Server(conn, srv)
		if serverErr = tc.Handshake(); serverErr == nil {
			_, serverErr = tc.Write([]byte("ok"))
		}
	})
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(conn, cli)
	if clientErr = tc.Handshake(); clientErr == nil {
		buf := make([]byte, 2)
		_, clientErr = io.ReadFull(tc, buf)
	}
	wg.Wait()
	return serverErr, clientErr
}

func TestMutualTLS(t *testing.T) {
	server, client, err := WriteTestPKI(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, otherClient, err := WriteTestPKI(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srvConf, err := server.Server()
	if err != nil {
		t.Fatal(err)
	}
	clientConf := func(f Files, name string) *tls.Config {
		c, err := f.Client(name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	noCert := clientConf(client, "localhost")
	noCert.Certificates = nil
	foreignCert := clientConf(client, "localhost")
	foreignCert.Certificates = clientConf(otherClient, "localhost").Certificates
	foreignRoots := clientConf(client, "localhost")
	foreignRoots.RootCAs = clientConf(otherClient, "localhost").RootCAs
	tls12 := clientConf(client, "127.0.0.1")
	tls12.MaxVersion = tls.VersionTLS12

	tests := []struct {
		name       string
		client     *tls.Config
		wantServer bool // server side succeeds
		wantClient bool // client side succeeds
	}{
		{"both configured", clientConf(client, "localhost"), true, true},
		{"by ip", clientConf(client, "127.0.0.1"), true, true},
		{"tls 1.2", tls12, true, true},
		{"client without cert", noCert, false, false},
		{"client cert from another ca", foreignCert, false, false},
		{"client trusts another ca", foreignRoots, false, false},
		{"client of another pki", clientConf(otherClient, "localhost"), false, false},
		{"name not in server cert", clientConf(client, "elsewhere.example"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serverErr, clientErr := handshake(t, srvConf, tt.client)
			if (serverErr == nil) != tt.wantServer {
				t.Errorf("server: got err %v, want success %v", serverErr, tt.wantServer)
			}
			if (clientErr == nil) != tt.wantClient {
				t.Errorf("client: got err %v, want success %v", clientErr, tt.wantClient)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	server, _, err := WriteTestPKI(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not pem\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files Files
		want  error
	}{
		{"disabled", Files{}, ErrDisabled},
		{"incomplete", Files{Cert: server.Cert}, ErrIncomplete},
		{"missing key file", Files{Cert: server.Cert, Key: filepath.Join(dir, "nope.pem"), CA: server.CA}, os.ErrNotExist},
		{"missing ca file", Files{Cert: server.Cert, Key: server.Key, CA: filepath.Join(dir, "nope.pem")}, os.ErrNotExist},
		{"ca without certs", Files{Cert: server.Cert, Key: server.Key, CA: empty}, ErrNoCACerts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.files.Server(); !errors.Is(err, tt.want) {
				t.Errorf("Server: got %v, want %v", err, tt.want)
			}
			if _, err := tt.files.Client(""); !errors.Is(err, tt.want) {
				t.Errorf("Client: got %v, want %v", err, tt.want)
			}
		})
	}
	c, err := server.Client("")
	if err != nil {
		t.Fatal(err)
	}
	if c.ServerName != "" || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("Client(\"\"): ServerName %q, MinVersion %x", c.ServerName, c.MinVersion)
	}
	s, err := server.Server()
	if err != nil {
		t.Fatal(err)
	}
	if s.ClientAuth != tls.RequireAndVerifyClientCert || s.ClientCAs == nil || s.MinVersion != tls.VersionTLS12 {
		t.Errorf("Server: ClientAuth %v, ClientCAs %v, MinVersion %x", s.ClientAuth, s.ClientCAs, s.MinVersion)
	}
}
