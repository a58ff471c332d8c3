package computeagent

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// TestCloseLeavesTheShares: a closing agent of a one-rank job tells the
// storage agent it is leaving, so the job leaves its shares at once; a
// rank of a job of several does not (the job outlives one rank).
func TestCloseLeavesTheShares(t *testing.T) {
	dir := writeImageFolder(t, -1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	startStorage(t, storageagent.Config{Data: dir, Name: "st1", CPUs: 2, AllowClientSpecs: true, Insecure: true},
		storageagent.Knobs{}, lis)
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other := dataplanepb.NewStorageClient(c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	jobs := func() uint32 {
		t.Helper()
		info, err := other.Info(metadata.AppendToOutgoingContext(ctx, dataplanepb.JobMetadata, "other"), &dataplanepb.InfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return info.GetJobs()
	}
	// Each case's job joins "other"'s: 2 jobs; after its Close, 1 if it
	// left, still 2 if not.
	for _, tc := range []struct {
		name  string
		world int
		after uint32
	}{{"one rank", 1, 1}, {"rank 0 of 2", 2, 2}} {
		cfg, _ := testConfig(t, nil, addr)
		cfg.Job, cfg.World = fmt.Sprintf("job-%d", tc.world), tc.world
		a, err := cfg.new()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.storage(ctx, a.epochConns(engine.Opts{})); err != nil {
			t.Fatal(err)
		}
		before := jobs()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if after := jobs(); before != 2 || after != tc.after {
			t.Errorf("%s: the storage agent counted %d jobs before the agent closed and %d after, want 2 and %d",
				tc.name, before, after, tc.after)
		}
	}
}
