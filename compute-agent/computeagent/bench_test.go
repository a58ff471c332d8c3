package computeagent

import (
	"context"
	"fmt"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// BenchmarkEpochLoopback runs whole epochs of 64 photo-like 500x375 JPEGs
// against a real storage agent over loopback TCP, per plan, and reports
// the wire throughput (SetBytes), img/s and the peak heap next to the
// window's byte bound.
func BenchmarkEpochLoopback(b *testing.B) {
	const n = 64
	dir := b.TempDir()
	for i := range n {
		img, err := synth.JPEG(uint64(i), 500, 375, synth.Options{})
		if err != nil {
			b.Fatal(err)
		}
		class := filepath.Join(dir, fmt.Sprintf("c%d", i%4))
		if err := os.MkdirAll(class, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(class, fmt.Sprintf("%02d.jpg", i)), img, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	sa, err := storageagent.New(storageagent.Config{Data: dir, Name: "bench", AllowClientSpecs: true, Insecure: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = sa.Serve(ctx, lis) })
	defer func() {
		cancel()
		sa.Close()
		wg.Wait()
	}()

	p := enginetest.Pipeline(b)
	resize, err := planner.ResizeOff(p)
	if err != nil {
		b.Fatal(err)
	}
	for _, plan := range []*policy.Plan{planner.NoOff(), resize, planner.AllOff(p)} {
		b.Run(plan.Policy, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Discovery = Static(lis.Addr().String())
			cfg.Insecure = true
			cfg.Pipeline = p
			cfg.Plan = plan
			cfg.Batch = 16
			cfg.WindowBytes = 4 << 20
			cfg.GPU = noGPU{}
			a, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			var peak atomic.Uint64
			stop := make(chan struct{})
			var mon sync.WaitGroup
			mon.Go(func() {
				var ms runtime.MemStats
				for {
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peak.Load() {
						peak.Store(ms.HeapInuse)
					}
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
			var bytes int64
			var secs float64
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				r, err := a.RunEpoch(context.Background(), uint64(i))
				if err != nil {
					b.Fatal(err)
				}
				bytes, secs = r.BytesReceived, secs+r.Seconds
			}
			b.StopTimer()
			close(stop)
			mon.Wait()
			b.SetBytes(bytes)
			b.ReportMetric(float64(n*b.N)/secs, "img/s")
			b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(cfg.WindowBytes)/(1<<20), "window-MiB")
		})
	}
}
