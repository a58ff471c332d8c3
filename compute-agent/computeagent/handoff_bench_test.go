package computeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/catalog"
	"github.com/sophon-dl/sophon/compute-agent/engine"
	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/compute-agent/trainer"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops"
)

// BenchmarkHandoffPython measures the hand-off from the agent's ring to a
// Python trainer (python/bench/handoff_consumer.py through the real
// client): batches of 256 x 224x224x3 uint8, written row by row into the
// slots by two placing goroutines as finishing workers do, consumed with
// no copy (views of the slot) and with one copy into a torch tensor. It
// reports the median GB/s of 5 runs per mode and the Go side's heap
// allocations per batch.
func BenchmarkHandoffPython(b *testing.B) {
	const python = "/usr/bin/python3"
	testutil.RequirePython(b, "python3-torch python3-numpy", "torch", "numpy")
	_, file, _, _ := runtime.Caller(0)
	consumer := filepath.Join(filepath.Dir(file), "../../python/bench/handoff_consumer.py")
	const batch, batches = 256, 40
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Discovery = Static("unused:1")
	cfg.Insecure = true
	cfg.Pipeline = p
	cfg.Batch = batch
	cfg.Trainer = TrainerConfig{Socket: filepath.Join(b.TempDir(), "bench.sock"), RingBytes: 4 << 30}
	a, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	hub, err := trainer.NewHub(a.hubConfig(&catalog.Catalog{Total: batch * batches, Fingerprint: "bench"}))
	if err != nil {
		b.Fatal(err)
	}
	a.hub = hub
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { hub.Serve(ctx) })
	img := ops.NewImage(224, 224)
	for i := range img.Pix {
		img.Pix[i] = byte(i * 31)
	}

	// Each run is one epoch of batches+1 batches; the consumer times the
	// last batches of them after an untimed first one, then leaves.
	run := func(mode string) (gbps, allocsPerBatch float64) {
		cmd := exec.Command(python, consumer, "--socket", cfg.Trainer.Socket, "--mode", mode, "--batches", strconv.Itoa(batches))
		out := make(chan []byte, 1)
		go func() {
			o, err := cmd.Output()
			if err != nil {
				b.Errorf("consumer: %v\n%s", err, o)
			}
			out <- o
		}()
		req, err := hub.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		e := engine.NewEpoch(&a.engine, req.Epoch, &catalog.Catalog{}, engine.Shard{}, engine.Opts{})
		asm := trainer.NewAssembler(e, a.engine.Trainer, req.Conns, trainer.Layout{Batch: batch, Queue: a.cfg.Queue,
			Rows: batch * (batches + 1), Batches: batches + 1, First: []int{0}, Positions: batch * (batches + 1)})
		if err := hub.Start(asm); err != nil {
			b.Fatal(err)
		}
		var pg sync.WaitGroup
		for w := range 2 {
			pg.Go(func() {
				wake := trainer.NewWaiter()
				for i := w; i < batch*(batches+1); i += 2 {
					if asm.Place(ctx, schedule.Item{Sample: uint64(i), Image: img}, wake) != nil {
						return // the consumer left
					}
				}
			})
		}
		// Heap allocations in the steady state: between the 5th and the
		// (batches-5)th batch published, the whole process's Go side.
		published := func() int { return asm.Stats()[0].Batches }
		var ms0, ms1 runtime.MemStats
		for published() < 5 {
			time.Sleep(time.Millisecond)
		}
		runtime.ReadMemStats(&ms0)
		n0 := published()
		for published() < batches-5 {
			time.Sleep(time.Millisecond)
		}
		runtime.ReadMemStats(&ms1)
		n1 := published()
		o := <-out
		asm.Abort(errBenchDone, handoff.CodeFailed)
		pg.Wait()
		hub.Finish()
		var res struct {
			GBPerS float64 `json:"gb_per_s"`
		}
		if err := json.Unmarshal(lastLine(o), &res); err != nil {
			b.Fatalf("consumer output %q: %v", o, err)
		}
		return res.GBPerS, float64(ms1.Mallocs-ms0.Mallocs) / float64(n1-n0)
	}
	for range b.N {
		for _, mode := range []string{"nocopy", "copy"} {
			var rates, allocs []float64
			for range 5 {
				r, al := run(mode)
				rates, allocs = append(rates, r), append(allocs, al)
			}
			slices.Sort(rates)
			b.ReportMetric(rates[2], "GB/s-"+mode)
			b.ReportMetric(slices.Max(allocs), "allocs/batch-"+mode)
			b.Logf("%s: GB/s per run %v (median %.2f); Go allocations per batch %v", mode, rates, rates[2], allocs)
		}
	}
}

var errBenchDone = errors.New("benchmark done")

// lastLine is the last non-empty line of out.
func lastLine(out []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	return lines[len(lines)-1]
}
