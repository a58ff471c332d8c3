// Package grpcbuf is the buffer pool both agents' gRPC connections use for
// their messages: gRPC's own tiers (mem.DefaultBufferPool), with a tier at
// every power of two from 256 bytes to 64 MiB.
//
// gRPC's default pool has tiers of 256 B, 4, 16 and 32 KiB and 1 MiB, and
// clears the whole of a pooled buffer before it hands it out. Every
// message between 32 KiB and 1 MiB (a crop's JPEG, a 224x224 uint8 crop, a
// raw photograph: nearly all of the agents' responses) then takes a 1 MiB
// buffer and clears all of it, on the storage agent when it marshals a
// response and on the compute agent when it reads one. With a tier at
// every power of two a message clears at most twice its size (the buffers
// stay zeroed before use, as gRPC wants them). Measured in docs/policy.md
// ("What the free bytes leave out") and by BenchmarkFetchPool
// (storage-agent/storageagent).
package grpcbuf

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// exponents are the pool's tiers: 2^8 to 2^26 bytes. A message over 64 MiB
// (above the agents' default payload limit) takes gRPC's fallback pool.
var exponents = func() []uint8 {
	var e []uint8
	for x := uint8(8); x <= 26; x++ {
		e = append(e, x)
	}
	return e
}()

// Pool is the agents' buffer pool.
var Pool = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(exponents...)
	if err != nil {
		panic("grpcbuf: " + err.Error()) // the exponents are constants within range
	}
	return p
}()

// The proto codec marshals with mem.DefaultBufferPool(), which only this
// can change, and only while packages initialise.
func init() { experimental.SetDefaultBufferPool(Pool) }

// ServerOption is the option that gives a gRPC server Pool (a server's
// default was fixed when package grpc initialised, before init above).
func ServerOption() grpc.ServerOption { return experimental.BufferPool(Pool) }

// DialOption is the option that gives a gRPC client Pool.
func DialOption() grpc.DialOption { return experimental.WithBufferPool(Pool) }
