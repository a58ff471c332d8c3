package storageagent

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sophon-dl/sophon/internal/tcpinfo"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// TestInfoTCPHeader: over TCP, Info's response header carries the
// TCP_INFO of the agent's end of the connection (tcpinfo.Header): what it
// sent, with a round trip; and the agent tracks the connection until it
// closes.
func TestInfoTCPHeader(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("TCP_INFO is Linux's, not %s's", runtime.GOOS)
	}
	cfg := DefaultConfig()
	cfg.Data = testData(t)
	cfg.Insecure = true
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.Serve(ctx, lis) })
	defer func() { cancel(); wg.Wait(); a.Close() }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	client := dataplanepb.NewStorageClient(conn)
	var info tcpinfo.Info
	for range 2 { // the second call's header counts the first's bytes
		var md metadata.MD
		ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := client.Info(ictx, &dataplanepb.InfoRequest{}, grpc.Header(&md))
		icancel()
		if err != nil {
			t.Fatal(err)
		}
		v := md.Get(tcpinfo.Header)
		if len(v) != 1 {
			t.Fatalf("header %v: want one %s", md, tcpinfo.Header)
		}
		if info, err = tcpinfo.Parse(v[0]); err != nil {
			t.Fatal(err)
		}
	}
	if info.BytesSent == 0 || info.SegmentsOut == 0 || info.RTT <= 0 {
		t.Errorf("storage end %+v: want bytes and segments sent and a round trip", info)
	}
	if n := a.srv.conns.Len(); n != 1 {
		t.Errorf("%d connections tracked, want 1", n)
	}
	conn.Close()
	for deadline := time.Now().Add(5 * time.Second); a.srv.conns.Len() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := a.srv.conns.Len(); n != 0 {
		t.Errorf("%d connections tracked after the client closed, want 0", n)
	}
}
