package computeagent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// blobServer answers Fetch streams with size-byte samples: per batch
// requests one response holding batch samples' bytes (batch 1: today's
// one response per request); perRequest: each request asks for batch
// samples at once.
type blobServer struct {
	dataplanepb.UnimplementedStorageServer
	msg        *dataplanepb.FetchResponse
	batch      int
	perRequest bool
}

func (s *blobServer) Fetch(stream dataplanepb.Storage_FetchServer) error {
	pending := 0
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if pending > 0 {
				return stream.Send(s.msg)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if pending++; s.perRequest || pending == s.batch {
			pending = 0
			if err := stream.Send(s.msg); err != nil {
				return err
			}
		}
	}
}

// cpuNow is this process's user and system CPU time.
func cpuNow() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFetchStream measures what one Fetch stream costs per sample of
// 10 and 16 KB (a compressed crop's size), over real gRPC with mutual TLS
// on loopback TCP, through the compute agent's own connection (its dial
// options and receive window) with 64 samples in flight: today's one
// response per request (batch 1), several samples' bytes in one
// response (resp-batch K: responses batched by the storage agent, one
// request per sample) and one request for K samples answered by one
// response (req-batch K). Both ends run in this process, so the CPU is
// both agents' together. Per op (one sample) it reports samples/s, the
// CPU per sample (cpu-us/sample), samples per CPU-second (per core) and
// the cores one stream would need to carry 500 Mbit/s of such samples
// (cores@500Mbit), and the samples per message.
func BenchmarkFetchStream(b *testing.B) {
	certs := b.TempDir()
	server, client, err := tlsconf.WriteTestPKI(certs, []string{"127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	stc, err := server.Server(tlsconf.Expect{Cluster: tlsconf.DefaultCluster, Role: tlsconf.RoleCompute})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{10 << 10, 16 << 10} {
		for _, c := range []struct {
			name       string
			batch      int
			perRequest bool
		}{{"batch1", 1, false}, {"resp-batch4", 4, false}, {"resp-batch16", 16, false}, {"req-batch16", 16, true}} {
			b.Run(fmt.Sprintf("%dKB/%s", size>>10, c.name), func(b *testing.B) {
				data := make([]byte, size*c.batch)
				rand.Read(data)
				srv := &blobServer{msg: &dataplanepb.FetchResponse{Tag: 1, Data: data}, batch: c.batch, perRequest: c.perRequest}
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				// The storage agent's transport options (storageagent's
				// serverOptions), its handler apart.
				gs := grpc.NewServer(grpc.Creds(tlsconf.Credentials(stc, nil)), grpc.WriteBufferSize(1<<20),
					grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: storageagent.MinPingInterval, PermitWithoutStream: true}))
				dataplanepb.RegisterStorageServer(gs, srv)
				var wg sync.WaitGroup
				wg.Go(func() { _ = gs.Serve(lis) })
				defer func() { gs.Stop(); wg.Wait() }()
				cfg, _ := testConfig(b, nil, lis.Addr().String())
				cfg.Insecure, cfg.TLS = false, client
				a, err := cfg.new()
				if err != nil {
					b.Fatal(err)
				}
				defer a.Close()
				cc, err := a.conn(lis.Addr().String(), "storage", 0)
				if err != nil {
					b.Fatal(err)
				}
				benchStream(b, dataplanepb.NewStorageClient(cc), size, c.batch, c.perRequest)
			})
		}
	}
}

// benchStream runs b.N samples over one stream of client, window 64.
func benchStream(b *testing.B, client dataplanepb.StorageClient, size, batch int, perRequest bool) {
	const window = 64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.Fetch(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// One round trip first: the handshake is not the stream's cost.
	if err := stream.Send(&dataplanepb.FetchRequest{Tag: 0, Sample: 1}); err != nil {
		b.Fatal(err)
	}
	if !perRequest && batch > 1 {
		for i := 1; i < batch; i++ {
			_ = stream.Send(&dataplanepb.FetchRequest{Tag: 0, Sample: 1})
		}
	}
	if _, err := stream.Recv(); err != nil {
		b.Fatal(err)
	}
	tokens := make(chan struct{}, window)
	for range window {
		tokens <- struct{}{}
	}
	n := b.N
	b.SetBytes(int64(size))
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuNow()
	var wg sync.WaitGroup
	wg.Go(func() {
		req := &dataplanepb.FetchRequest{Sample: 1, Split: 0}
		for sent := 0; sent < n; {
			k := 1
			if perRequest {
				k = min(batch, n-sent)
			}
			for range k {
				<-tokens
			}
			req.Tag = uint64(sent + 1)
			if err := stream.Send(req); err != nil {
				return
			}
			sent += k
		}
		_ = stream.CloseSend()
	})
	got, msgs := 0, 0
	for got < n {
		msgs++
		resp, err := stream.Recv()
		if err != nil {
			b.Fatalf("after %d of %d samples: %v", got, n, err)
		}
		k := max(1, len(resp.GetData())/size)
		got += k
		for range k {
			select {
			case tokens <- struct{}{}:
			default: // the last response, padded to a whole batch
			}
		}
	}
	wg.Wait()
	b.StopTimer()
	wall, cpu := time.Since(start).Seconds(), (cpuNow() - cpu0).Seconds()
	perSample := cpu / float64(n)
	b.ReportMetric(float64(n)/wall, "samples/s")
	b.ReportMetric(float64(got)/float64(msgs), "samples/msg")
	b.ReportMetric(perSample*1e6, "cpu-us/sample")
	b.ReportMetric(1/perSample, "samples/cpu-s")
	b.ReportMetric(500e6/8/float64(size)*perSample, "cores@500Mbit")
}

// BenchmarkFetchStorageAgent is BenchmarkFetchStream's one response per
// request against the real storage agent (mutual TLS, loopback TCP, a
// JPEG of about 15 KB fetched raw over and over): what a sample costs
// both agents beyond the stream's own framing.
func BenchmarkFetchStorageAgent(b *testing.B) {
	certs, err := tlsconf.WriteDevCerts(tlsconf.DevCerts{Dir: b.TempDir(), Cluster: "lab",
		Storage: []string{"st"}, Compute: []string{"c"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(b.TempDir(), "data")
	img, err := synth.JPEG(1, 200, 150, synth.Options{Quality: 85})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 4 {
		if err := os.MkdirAll(filepath.Join(dir, "c"), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "c", fmt.Sprintf("%d.jpg", i)), img, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	sa, err := storageagent.New(storageagent.Config{Data: dir, Name: "st", CPUs: 1, Cluster: "lab", TLS: certs.Storage["st"]})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = sa.Serve(ctx, lis) })
	defer func() { cancel(); sa.Close(); wg.Wait() }()
	b.Run(fmt.Sprintf("%dKB", len(img)>>10), func(b *testing.B) {
		cfg, _ := testConfig(b, nil, lis.Addr().String())
		cfg.Insecure, cfg.Cluster, cfg.TLS = false, "lab", certs.Compute["c"]
		a, err := cfg.new()
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		cc, err := a.conn(lis.Addr().String(), "st", 0)
		if err != nil {
			b.Fatal(err)
		}
		benchStream(b, dataplanepb.NewStorageClient(cc), len(img), 1, false)
	})
}
