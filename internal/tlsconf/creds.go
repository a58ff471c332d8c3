package tlsconf

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/credentials"

	"github.com/sophon-dl/sophon/internal/peerlog"
)

// Credentials returns gRPC transport credentials for conf that report
// every failed handshake, on either side, to onReject with the peer's
// address and the reason: a plaintext client, no or an untrusted or expired
// certificate, or a certificate of another cluster, role or node. Nil
// onReject reports nothing.
//
// NB: under TLS 1.3 a client finishes its handshake before the server has
// checked the client's certificate, so a rejected client certificate shows
// as a failed handshake on the server and as a failed first RPC on the
// client.
func Credentials(conf *tls.Config, onReject func(peer net.Addr, err error)) credentials.TransportCredentials {
	return reporting{credentials.NewTLS(conf), onReject}
}

// LogRejects is an onReject for [Credentials] that logs at warn level
// through lim ([peerlog.TLSHandshakeRejected]): anyone who reaches the port
// can fail handshakes as fast as they connect, so the lines are
// rate-limited and counted there. A nil lim logs every one.
func LogRejects(lim *peerlog.Limiter, log zerolog.Logger) func(net.Addr, error) {
	return func(peer net.Addr, err error) {
		p := "unknown"
		if peer != nil {
			p = peer.String()
		}
		ev := lim.WarnPeer(log, peerlog.TLSHandshakeRejected, p)
		if ev == nil {
			return // dropped: skip building the strings
		}
		ev.Str("peer", p).Str("reason", err.Error()).Msg("tls handshake rejected")
	}
}

// reporting wraps transport credentials to report failed handshakes.
type reporting struct {
	credentials.TransportCredentials
	onReject func(net.Addr, error)
}

var _ credentials.TransportCredentials = reporting{}

func (r reporting) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := r.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil && r.onReject != nil && ctx.Err() == nil {
		r.onReject(raw.RemoteAddr(), err)
	}
	return conn, info, err
}

func (r reporting) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := r.TransportCredentials.ServerHandshake(raw)
	if err != nil && r.onReject != nil {
		r.onReject(raw.RemoteAddr(), err)
	}
	return conn, info, err
}

func (r reporting) Clone() credentials.TransportCredentials {
	return reporting{r.TransportCredentials.Clone(), r.onReject}
}
