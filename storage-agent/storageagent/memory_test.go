package storageagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/errkind"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
	"github.com/sophon-dl/sophon/storage-agent/dataset/datasettest"
)

// procStatus is a /proc/PID/status field (VmRSS, VmHWM) in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb << 10
		}
	}
	t.Fatalf("no %s", field)
	return 0
}

// memoryBurstData writes the hostile corpus, large valid JPEGs (4000x3000,
// several copies of each) and small ones into a new directory.
func memoryBurstData(t *testing.T) string {
	dir := t.TempDir()
	for i, c := range hostile.Corpus() {
		datasettest.WriteFile(t, fmt.Sprintf("%s/hostile/%03d.jpg", dir, i), c.Data)
	}
	for s := range 4 {
		big, err := synth.JPEG(uint64(100+s), 4000, 3000, synth.Options{})
		datasettest.Must(t, err)
		for k := range 6 {
			datasettest.WriteFile(t, fmt.Sprintf("%s/large/%d-%d.jpg", dir, s, k), big)
		}
	}
	for i := range 100 {
		datasettest.WriteFile(t, fmt.Sprintf("%s/small/%03d.jpg", dir, i), datasettest.JPEG(t, uint64(i%10)))
	}
	return dir
}

// burst sends every sample at split 1 (the full decode) and at split 5 of
// imagenet-train on each of streams streams at once, reading the responses,
// and returns the failures by kind.
func burst(t *testing.T, c dataplanepb.StorageClient, n uint64, streams int) map[string]int {
	id := preset(t, "imagenet-train").ID()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	failed := map[string]int{}
	var wg sync.WaitGroup
	for k := range streams {
		wg.Go(func() {
			stream, err := c.Fetch(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			go func() {
				for i := range n {
					// Each stream its own order, so the agent holds many
					// different samples at once.
					s := (i*7 + uint64(k)*13) % n
					split := uint32(1)
					if (i+uint64(k))%2 == 1 {
						split = 5
					}
					if stream.Send(&dataplanepb.FetchRequest{Tag: i, Sample: s, Split: split, PipelineId: id}) != nil {
						return
					}
				}
				stream.CloseSend()
			}()
			for {
				r, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					t.Errorf("stream %d: %v", k, err)
					return
				}
				if r.Error != nil {
					mu.Lock()
					failed[errkind.Name(r.Error.Kind)]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed
}

// TestIdleMemoryReturns (SOPHON_RELIABILITY=full, make reliability): the
// agent binary, idle, then a burst of the hostile corpus and 12 MP JPEGs
// (full decodes and imagenet-train prefixes) on 16 streams, then 60 s idle:
// its resident set must come back within twice the idle baseline.
func TestIdleMemoryReturns(t *testing.T) {
	if os.Getenv("SOPHON_RELIABILITY") != "full" {
		t.Skip("a 60 s idle wait: set SOPHON_RELIABILITY=full (make reliability)")
	}
	data := memoryBurstData(t)
	p := startBinary(t, data)
	c, conn := p.client(t, "good")
	info, err := c.Info(context.Background(), &dataplanepb.InfoRequest{})
	datasettest.Must(t, err)
	n := info.GetSamples()
	pid := p.cmd.Process.Pid
	p.settle(t)
	base := procStatus(t, pid, "VmRSS")
	start := time.Now()
	failed := burst(t, c, n, 16)
	took := time.Since(start)
	p.settle(t)
	atEnd := procStatus(t, pid, "VmRSS")
	peak := procStatus(t, pid, "VmHWM")
	time.Sleep(60 * time.Second)
	after := procStatus(t, pid, "VmRSS")
	p.serving(t, conn)
	t.Logf("burst: 16 streams x %d samples in %v (typed errors %v); RSS idle %d MiB, peak %d MiB, at the end of the burst %d MiB, after 60 s idle %d MiB",
		n, took.Round(time.Second), failed, base>>20, peak>>20, atEnd>>20, after>>20)
	if peak < 2*base {
		t.Errorf("peak RSS %d MiB: the burst did not load the agent (idle %d MiB)", peak>>20, base>>20)
	}
	if after > 2*base {
		t.Errorf("RSS %d MiB after 60 s idle, want within 2x of the idle %d MiB", after>>20, base>>20)
	}
}
