package storageagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/url"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// TestPeerKeyAcrossConnections: a compute agent that stripes its streams
// over several TCP connections (compute-agent --conns) is one client to
// the per-peer stream limit and the fair queue: its connections differ
// only in their source port, and under mutual TLS share its certificate.
func TestPeerKeyAcrossConnections(t *testing.T) {
	at := func(port int, cert *x509.Certificate) context.Context {
		p := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: port}}
		if cert != nil {
			p.AuthInfo = credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}
		}
		return peer.NewContext(context.Background(), p)
	}
	if a, b := peerKey(at(40001, nil)), peerKey(at(40002, nil)); a != b || a != "10.0.0.2" {
		t.Errorf("without TLS: keys %q and %q, want both 10.0.0.2", a, b)
	}
	id, _ := url.Parse("spiffe://lab/compute/c1")
	cert := &x509.Certificate{URIs: []*url.URL{id}, Subject: pkix.Name{CommonName: "c1"}}
	if a, b := peerKey(at(40001, cert)), peerKey(at(40002, cert)); a != b || a != id.String() {
		t.Errorf("under TLS: keys %q and %q, want both %q", a, b, id)
	}
}
