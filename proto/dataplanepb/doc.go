// Package dataplanepb is the data plane's wire contract between a storage
// agent and a compute agent: the Storage service and its messages, generated
// from dataplane.proto (make proto), and the catalog fingerprint both agents
// compute. It imports nothing of the module; the placement's wire form is
// package internal/placement/wire.
package dataplanepb
