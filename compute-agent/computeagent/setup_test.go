package computeagent

import (
	"cmp"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/report"
)

// delivery is what OnSample saw.
type delivery struct {
	epoch, sample uint64
	sha           [32]byte
}

type recorder struct {
	mu  sync.Mutex
	got []delivery
}

func (r *recorder) on(epoch, sample uint64, sha [32]byte) {
	r.mu.Lock()
	r.got = append(r.got, delivery{epoch, sample, sha})
	r.mu.Unlock()
}

func (r *recorder) epoch(e uint64) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []delivery
	for _, d := range r.got {
		if d.epoch == e {
			out = append(out, d)
		}
	}
	return out
}

// noGPU is a GPU monitor for tests: no NVML probing.
type noGPU struct{}

func (noGPU) Sample(ctx context.Context) report.GPUStats {
	<-ctx.Done()
	return report.GPUStats{Status: "nvml: unavailable: test"}
}

// testSetup is a test agent's Config and Knobs.
type testSetup struct {
	Config
	Knobs
	// within bounds the run (runAgent); zero means 20 s.
	within time.Duration
}

// new is NewWithKnobs of s.
func (s testSetup) new() (*Agent, error) { return NewWithKnobs(s.Config, s.Knobs) }

// testConfig is a small configuration over net's servers at addrs.
func testConfig(t testing.TB, n *enginetest.MemNet, addrs ...string) (testSetup, *recorder) {
	rec := &recorder{}
	cfg := testSetup{Config: DefaultConfig()}
	cfg.Discovery = Static(addrs...)
	cfg.Insecure = true // TLS is tested in storage_test.go
	cfg.Pipeline = enginetest.Pipeline(t)
	cfg.Seed = 7
	cfg.Window = 8
	cfg.Workers = 2
	cfg.Batch = 8
	cfg.Queue = 2
	if n != nil {
		cfg.Dial = n.Dial
	}
	cfg.GPU = noGPU{}
	cfg.OnSample = rec.on
	return cfg, rec
}

// runAgent runs cfg to completion under a deadline.
func runAgent(t testing.TB, cfg testSetup) ([]report.EpochReport, error) {
	t.Helper()
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(cfg.within, 20*time.Second))
	defer cancel()
	return a.Run(ctx)
}

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}
