// Package tlsconf builds the mutual-TLS configurations both agents use for
// their gRPC connections from three PEM files: a certificate, its private key
// and the CA that signs every agent's certificate. The storage agent's server
// requires and verifies a client certificate signed by that CA; the compute
// agent presents its own certificate and verifies the server's against the
// same CA.
//
// [WriteTestPKI] writes a throw-away CA and a server and client key pair, for
// tests and for a first try-out; real deployments bring their own PKI.
package tlsconf
