package computeagent

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// The job name (Config.Job).
//
// Storage agents divide their CPU budgets among the training jobs they
// serve and tell each job its share in Info (share_cpus), which the
// planner plans for (planner.Host.Shares). A job is named on every call
// to a storage agent, Info and Fetch alike, in the dataplanepb.JobMetadata
// metadata, by interceptors on each connection, so that every connection
// and every rank of one job counts as that one job.

// defaultJob is the job name when Config.Job is empty: "run-" and a hash
// of what every rank of one run shares (the seed, the first epoch, the
// world and the pipeline). NB: two runs alike in all four share it, and
// with it one share.
func defaultJob(seed, first uint64, world int, pipeID string) string {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], seed)
	binary.LittleEndian.PutUint64(b[8:], first)
	binary.LittleEndian.PutUint64(b[16:], uint64(world))
	h := sha256.New()
	h.Write(b[:])
	h.Write([]byte(pipeID))
	return "run-" + hex.EncodeToString(h.Sum(nil)[:6])
}

// jobOptions are the dial options that name job on every call.
func jobOptions(job string) []grpc.DialOption {
	named := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, dataplanepb.JobMetadata, job)
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(named(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(named(ctx), desc, cc, method, opts...)
		}),
	}
}
