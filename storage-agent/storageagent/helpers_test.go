package storageagent

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/internal/grpcbuf"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// testAgent is an agent serving on a bufconn listener with a client dialled
// to it.
type testAgent struct {
	*Agent
	client dataplanepb.StorageClient
	conn   *grpc.ClientConn
}

// startAgent serves cfg over bufconn until the test ends.
func startAgent(t testing.TB, cfg Config) *testAgent {
	t.Helper()
	return startAgentWithKnobs(t, cfg, Knobs{})
}

// startAgentWithKnobs is startAgent with test hooks.
func startAgentWithKnobs(t testing.TB, cfg Config, k Knobs) *testAgent {
	t.Helper()
	a, err := NewWithKnobs(cfg, k)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	lis := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Serve(ctx, lis); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes)),
		experimental.WithBufferPool(cmp.Or(k.BufferPool, grpcbuf.Pool)),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		wg.Wait()
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &testAgent{Agent: a, client: dataplanepb.NewStorageClient(conn), conn: conn}
}

// fetchAll sends reqs on one stream, half-closes it and returns the
// responses by tag.
func fetchAll(t testing.TB, c dataplanepb.StorageClient, reqs []*dataplanepb.FetchRequest) map[uint64]*dataplanepb.FetchResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var sendErr error
	wg.Go(func() {
		for _, r := range reqs {
			if sendErr = stream.Send(r); sendErr != nil {
				return
			}
		}
		sendErr = stream.CloseSend()
	})
	got := map[uint64]*dataplanepb.FetchResponse{}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if _, dup := got[resp.Tag]; dup {
			t.Fatalf("tag %d answered twice", resp.Tag)
		}
		got[resp.Tag] = resp
	}
	wg.Wait()
	if sendErr != nil {
		t.Fatalf("Send: %v", sendErr)
	}
	if len(got) != len(reqs) {
		t.Fatalf("got %d responses, want %d", len(got), len(reqs))
	}
	return got
}

// wireBytes is v's uncompressed wire form, to compare values exactly.
func wireBytes(t testing.TB, v ops.Value) []byte {
	t.Helper()
	b, err := wireform.Encode(v, wireform.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// settleGoroutines waits until the goroutine count is back to at most want.
func settleGoroutines(t testing.TB, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, want at most %d:\n%s", n, want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
