// Package tlsconf builds the mutual-TLS 1.3 configurations both agents use
// for their gRPC connections from three PEM files ([Files]): a certificate,
// its private key and the CA that signs every agent's certificate.
//
// Trusting the CA is not enough: every certificate names its agent with a
// URI SAN sophon://<cluster>/<role>/<node-name> ([Identity]), and each side
// checks the other's ([Expect]) in tls.Config.VerifyConnection. A storage
// agent's server accepts only compute agents of its cluster; a compute agent
// accepts only storage agents of its cluster and, when gossip told it the
// node's name, only that node. A rejected peer's handshake error wraps
// [ErrNotMember], [ErrWrongRole], [ErrWrongName] or [ErrNoIdentity], or is
// crypto/tls's own (unknown CA, expired, no certificate, plaintext).
// [Credentials] wraps gRPC's TLS credentials to report every rejected
// handshake with the peer's address.
//
// [WriteDevCerts] makes a development CA, a key pair per node and a gossip
// key (the agents' "certs" subcommand, make certs); [CA] issues any kind of
// certificate for tests.
package tlsconf
