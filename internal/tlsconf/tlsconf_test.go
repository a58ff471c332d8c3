package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
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
	id, err := IdentityOf(cert)
	if err != nil || id != (Identity{DefaultCluster, RoleStorage, "storage"}) {
		t.Errorf("server identity: got %v, %v", id, err)
	}
	if got := cert.URIs[0].String(); got != "sophon://sophon/storage/storage" {
		t.Errorf("server URI SAN: got %q", got)
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
		if srv == nil { // plaintext server
			_, serverErr = conn.Write([]byte("ok"))
			return
		}
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
	if cli == nil { // plaintext client
		_, clientErr = conn.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		buf := make([]byte, 2)
		if clientErr == nil {
			_, clientErr = io.ReadFull(conn, buf)
		}
		wg.Wait()
		return serverErr, clientErr
	}
	tc := tls.Client(conn, cli)
	if clientErr = tc.Handshake(); clientErr == nil {
		buf := make([]byte, 2)
		_, clientErr = io.ReadFull(tc, buf)
	}
	wg.Wait()
	return serverErr, clientErr
}

// testPKI is a CA with the certificates the handshake tests need.
type testPKI struct {
	ca, other *CA
	dir       string
	n         int
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := NewCA(filepath.Join(dir, "ca"), "test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA(filepath.Join(dir, "other"), "another CA")
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{ca: ca, other: other, dir: dir}
}

// issue makes a key pair signed by ca that trusts the cluster's CA.
func (p *testPKI) issue(t *testing.T, ca *CA, l Leaf) Files {
	t.Helper()
	if l.File == "" {
		p.n++
		l.File = fmt.Sprintf("leaf%d", p.n)
	}
	if len(l.Hosts) == 0 {
		l.Hosts = []string{"localhost", "127.0.0.1"}
	}
	f, err := ca.Issue(p.dir, l)
	if err != nil {
		t.Fatal(err)
	}
	f.CA = p.ca.File // every pair trusts the cluster's CA
	return f
}

func TestMutualTLS(t *testing.T) {
	p := newTestPKI(t)
	now := time.Now()
	storage := p.issue(t, p.ca, Leaf{Identity: Identity{"prod", RoleStorage, "s1"}})
	compute := p.issue(t, p.ca, Leaf{Identity: Identity{"prod", RoleCompute, "c1"}})
	foreignCA := p.issue(t, p.other, Leaf{Identity: Identity{"prod", RoleCompute, "c1"}})
	expired := p.issue(t, p.ca, Leaf{Identity: Identity{"prod", RoleCompute, "c1"}, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour)})
	otherCluster := p.issue(t, p.ca, Leaf{Identity: Identity{"test", RoleCompute, "c1"}})
	wrongRole := p.issue(t, p.ca, Leaf{Identity: Identity{"prod", RoleStorage, "s2"}})
	noIdentity := p.issue(t, p.ca, Leaf{Identity: Identity{"prod", "admin", "x"}, Raw: true})
	storageOther := p.issue(t, p.ca, Leaf{Identity: Identity{"test", RoleStorage, "s1"}})
	storageAsCompute := p.issue(t, p.ca, Leaf{Identity: Identity{"prod", RoleCompute, "s1"}})
	expiredStorage := p.issue(t, p.ca, Leaf{Identity: Identity{"prod", RoleStorage, "s1"}, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour)})
	foreignStorage := p.issue(t, p.other, Leaf{Identity: Identity{"prod", RoleStorage, "s1"}})

	serverConf := func(f Files) *tls.Config {
		c, err := f.Server(Expect{Cluster: "prod", Role: RoleCompute})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	clientConf := func(f Files, host, name string) *tls.Config {
		c, err := f.Client(Expect{Cluster: "prod", Role: RoleStorage, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		c.ServerName = host
		return c
	}
	noCert := clientConf(compute, "localhost", "")
	noCert.Certificates = nil
	tls12 := clientConf(compute, "localhost", "")
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12

	tests := []struct {
		name       string
		server     *tls.Config // nil: plaintext
		client     *tls.Config // nil: plaintext
		wantServer error       // nil: server side succeeds; errAny: fails
		wantClient error
	}{
		{"good pair", serverConf(storage), clientConf(compute, "localhost", ""), nil, nil},
		{"good pair by ip and name", serverConf(storage), clientConf(compute, "127.0.0.1", "s1"), nil, nil},
		{"plaintext client", serverConf(storage), nil, errAny, errAny},
		{"plaintext server", nil, clientConf(compute, "localhost", ""), nil, errAny},
		{"tls 1.2", serverConf(storage), tls12, errAny, errAny},
		{"no client certificate", serverConf(storage), noCert, errAny, errAny},
		{"client cert from another ca", serverConf(storage), clientConf(foreignCA, "localhost", ""), errAny, errAny},
		{"expired client cert", serverConf(storage), clientConf(expired, "localhost", ""), errAny, errAny},
		{"client of another cluster", serverConf(storage), clientConf(otherCluster, "localhost", ""), ErrNotMember, errAny},
		{"client of the wrong role", serverConf(storage), clientConf(wrongRole, "localhost", ""), ErrWrongRole, errAny},
		{"client without identity", serverConf(storage), clientConf(noIdentity, "localhost", ""), ErrNoIdentity, errAny},
		{"server of another cluster", serverConf(storageOther), clientConf(compute, "localhost", ""), errAny, ErrNotMember},
		{"server of the wrong role", serverConf(storageAsCompute), clientConf(compute, "localhost", ""), errAny, ErrWrongRole},
		{"server not the gossiped node", serverConf(storage), clientConf(compute, "localhost", "s2"), errAny, ErrWrongName},
		{"expired server cert", serverConf(expiredStorage), clientConf(compute, "localhost", ""), errAny, errAny},
		{"server cert from another ca", serverConf(foreignStorage), clientConf(compute, "localhost", ""), errAny, errAny},
		{"name not in server cert", serverConf(storage), clientConf(compute, "elsewhere.example", ""), errAny, errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serverErr, clientErr := handshake(t, tt.server, tt.client)
			check := func(side string, got, want error) {
				switch {
				case want == nil && got != nil:
					t.Errorf("%s: got err %v, want success", side, got)
				case want != nil && got == nil:
					t.Errorf("%s: got success, want error %v", side, want)
				case want != nil && want != errAny && !errors.Is(got, want):
					t.Errorf("%s: got err %v, want %v", side, got, want)
				}
			}
			check("server", serverErr, tt.wantServer)
			check("client", clientErr, tt.wantClient)
		})
	}
}

// errAny stands for any error in the handshake tables.
var errAny = errors.New("any error")

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
	want := Expect{Cluster: DefaultCluster, Role: RoleCompute}
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
			if _, err := tt.files.Server(want); !errors.Is(err, tt.want) {
				t.Errorf("Server: got %v, want %v", err, tt.want)
			}
			if _, err := tt.files.Client(want); !errors.Is(err, tt.want) {
				t.Errorf("Client: got %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := server.Server(Expect{Role: RoleCompute}); !errors.Is(err, ErrBadIdentity) {
		t.Errorf("Server without cluster: got %v, want %v", err, ErrBadIdentity)
	}
	c, err := server.Client(want)
	if err != nil {
		t.Fatal(err)
	}
	if c.ServerName != "" || c.MinVersion != tls.VersionTLS13 || c.VerifyConnection == nil {
		t.Errorf("Client: ServerName %q, MinVersion %x", c.ServerName, c.MinVersion)
	}
	s, err := server.Server(want)
	if err != nil {
		t.Fatal(err)
	}
	if s.ClientAuth != tls.RequireAndVerifyClientCert || s.ClientCAs == nil || s.MinVersion != tls.VersionTLS13 || s.VerifyConnection == nil {
		t.Errorf("Server: ClientAuth %v, ClientCAs %v, MinVersion %x", s.ClientAuth, s.ClientCAs, s.MinVersion)
	}
	id, err := server.Identity()
	if err != nil || id != (Identity{DefaultCluster, RoleStorage, "storage"}) {
		t.Errorf("Identity: got %v, %v", id, err)
	}
}

func TestWriteDevCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	o := DevCerts{Dir: dir, Cluster: "lab", Storage: []string{"s1", "s2"}, Compute: []string{"c1"}, Hosts: []string{"storage.lab", "10.0.0.5"}, Validity: 30 * 24 * time.Hour}
	first, err := WriteDevCerts(o)
	if err != nil {
		t.Fatal(err)
	}
	if first.CAKept || first.GossipKeyKept || len(first.Storage) != 2 || len(first.Compute) != 1 {
		t.Fatalf("first run: %+v", first)
	}
	for _, name := range []string{"ca-key.pem", "storage-s1-key.pem", "storage-s2-key.pem", "compute-c1-key.pem", "gossip.key"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o600 {
			t.Errorf("%s mode: got %v, want 0600", name, got)
		}
	}
	cert := readCert(t, first.Storage["s2"].Cert)
	if got := cert.URIs[0].String(); got != "sophon://lab/storage/s2" {
		t.Errorf("URI SAN: got %q", got)
	}
	if err := cert.VerifyHostname("10.0.0.5"); err != nil {
		t.Errorf("VerifyHostname: %v", err)
	}
	if d := cert.NotAfter.Sub(cert.NotBefore); d != 30*24*time.Hour {
		t.Errorf("validity: got %v, want 720h", d)
	}
	caBefore, _ := os.ReadFile(first.CA)
	keyBefore, _ := os.ReadFile(first.GossipKey)

	second, err := WriteDevCerts(o)
	if err != nil {
		t.Fatal(err)
	}
	caAfter, _ := os.ReadFile(second.CA)
	keyAfter, _ := os.ReadFile(second.GossipKey)
	if !second.CAKept || !second.GossipKeyKept || string(caBefore) != string(caAfter) || string(keyBefore) != string(keyAfter) {
		t.Errorf("second run did not keep the CA and the gossip key: %+v", second)
	}
	// A certificate of the first run still works with one of the second.
	srv, err := first.Storage["s1"].Server(Expect{Cluster: "lab", Role: RoleCompute})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := second.Compute["c1"].Client(Expect{Cluster: "lab", Role: RoleStorage, Name: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	cli.ServerName = "storage.lab"
	if serr, cerr := handshake(t, srv, cli); serr != nil || cerr != nil {
		t.Errorf("handshake across runs: server %v, client %v", serr, cerr)
	}

	if _, err := WriteDevCerts(DevCerts{Dir: dir, Storage: []string{"bad/name"}}); !errors.Is(err, ErrBadIdentity) {
		t.Errorf("bad name: got %v, want %v", err, ErrBadIdentity)
	}
}

func TestIdentity(t *testing.T) {
	tests := []struct {
		id   Identity
		want error
	}{
		{Identity{"sophon", RoleStorage, "s1"}, nil},
		{Identity{"sophon", "admin", "s1"}, ErrBadIdentity},
		{Identity{"", RoleStorage, "s1"}, ErrBadIdentity},
		{Identity{"sophon", RoleCompute, ""}, ErrBadIdentity},
		{Identity{"a b", RoleCompute, "c"}, ErrBadIdentity},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			if got := tt.id.Validate(); !errors.Is(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
