package storageagent

import (
	"context"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// asJob is ctx naming the job of its calls.
func asJob(ctx context.Context, job string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, dataplanepb.JobMetadata, job)
}

// TestInfoShares: Info tells each job its weighted share of the budget,
// counting the jobs that asked, and the whole budget with shares off.
func TestInfoShares(t *testing.T) {
	cfg := testConfig(t)
	cfg.CPUs = 2
	cfg.JobWeights = map[string]float64{"big": 3}
	a := startAgent(t, cfg)
	ctx := context.Background()
	for _, step := range []struct {
		job    string
		share  float64
		jobs   uint32
		weight float64
	}{
		{"a", 2, 1, 1},
		{"big", 1.5, 2, 3},
		{"a", 0.5, 2, 1},
	} {
		info, err := a.client.Info(asJob(ctx, step.job), &dataplanepb.InfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(info.ShareCpus-step.share) > 1e-9 || info.Jobs != step.jobs || info.Job != step.job || info.JobWeight != step.weight {
			t.Fatalf("Info as %s: share %v of %v cpus, %d jobs, job %q weight %v; want share %v, %d jobs, weight %v",
				step.job, info.ShareCpus, info.Cpus, info.Jobs, info.Job, info.JobWeight, step.share, step.jobs, step.weight)
		}
	}
	// A client that names no job is a job of its own, counted by its
	// streams, not its Info.
	info, err := a.client.Info(ctx, &dataplanepb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(info.ShareCpus-0.4) > 1e-9 || info.Jobs != 3 {
		t.Fatalf("unnamed Info: share %v, %d jobs, want 0.4, 3", info.ShareCpus, info.Jobs)
	}
	// big leaves: a has the whole budget again (the unnamed client has
	// no stream open).
	if _, err := a.client.Info(asJob(ctx, "big"), &dataplanepb.InfoRequest{Leaving: true}); err != nil {
		t.Fatal(err)
	}
	info, err = a.client.Info(asJob(ctx, "a"), &dataplanepb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(info.ShareCpus-2) > 1e-9 || info.Jobs != 1 {
		t.Fatalf("after big left, Info as a: share %v, %d jobs, want 2, 1", info.ShareCpus, info.Jobs)
	}
	if _, err := a.client.Info(asJob(ctx, "bad name!"), &dataplanepb.InfoRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad job name: got %v, want InvalidArgument", err)
	}

	cfg = testConfig(t)
	cfg.NoJobShares = true
	off := startAgent(t, cfg)
	for _, job := range []string{"a", "b"} {
		info, err := off.client.Info(asJob(ctx, job), &dataplanepb.InfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if info.ShareCpus != cfg.CPUs {
			t.Fatalf("shares off, Info as %s: share %v, want the budget %v", job, info.ShareCpus, cfg.CPUs)
		}
	}
}

// TestFetchMaxJobs: a stream of a new job beyond MaxJobs is refused while
// the others are open; another stream of an active job is not.
func TestFetchMaxJobs(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxJobs = 1
	a := startAgent(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(job string) error {
		stream, err := a.client.Fetch(asJob(ctx, job))
		if err != nil {
			return err
		}
		// The server answers the stream's first request, or refuses it.
		// A stream it refused before the request went out fails Send with
		// io.EOF; Recv then gives the refusal's status (grpc's SendMsg).
		if err := stream.Send(&dataplanepb.FetchRequest{Tag: 1, Sample: 0}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = stream.Recv()
		return err
	}
	if err := open("one"); err != nil {
		t.Fatal(err)
	}
	if err := open("one"); err != nil {
		t.Fatalf("second stream of an active job: %v", err)
	}
	if err := open("two"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second job past MaxJobs 1: got %v, want ResourceExhausted", err)
	}
	if err := open(""); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an empty job name: got %v, want InvalidArgument", err)
	}
}

// TestInfoSentCounters: Info counts the payload bytes and the ops' CPU of
// every response sent, whichever job it went to.
func TestInfoSentCounters(t *testing.T) {
	a := startAgent(t, testConfig(t))
	id := preset(t, "imagenet-train").ID()
	var reqs []*dataplanepb.FetchRequest
	for i := range uint64(goodSamples) {
		reqs = append(reqs, &dataplanepb.FetchRequest{Tag: i, Sample: i, Split: uint32(i % 3), PipelineId: id})
	}
	got := fetchAll(t, a.client, reqs)
	var bytes, ops uint64
	for _, r := range got {
		bytes += uint64(len(r.Data))
		ops += r.StorageCpuNs
	}
	info, err := a.client.Info(asJob(context.Background(), "other"), &dataplanepb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.SentBytes != bytes || info.SentOpsCpuNs != ops || bytes == 0 || ops == 0 {
		t.Fatalf("Info: sent %d bytes, %d ns of ops; the responses carried %d bytes, %d ns", info.SentBytes, info.SentOpsCpuNs, bytes, ops)
	}
}
