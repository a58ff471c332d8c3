package computeagent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/internal/tlsconf"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/policy"
)

// checkOnce fails unless got holds every sample of want exactly once.
func checkOnce(t *testing.T, got []delivery, want []uint64) {
	t.Helper()
	seen := map[uint64]int{}
	for _, d := range got {
		seen[d.sample]++
	}
	for _, s := range want {
		if seen[s] != 1 {
			t.Errorf("sample %d delivered %d times, want 1", s, seen[s])
		}
		delete(seen, s)
	}
	for s, n := range seen {
		t.Errorf("sample %d delivered %d times, not in the shard", s, n)
	}
}

func allSamples() []uint64 {
	s := make([]uint64, enginetest.Samples)
	for i := range s {
		s[i] = uint64(i)
	}
	return s
}

// checkReport checks a report's internal consistency.
func checkReport(t *testing.T, r report.EpochReport) {
	t.Helper()
	sum, bytes := 0, int64(0)
	for _, s := range r.BySplit {
		sum += s.Samples
		bytes += s.Bytes
	}
	if sum != r.Samples {
		t.Errorf("epoch %d: samples by split sum to %d, samples %d", r.Epoch, sum, r.Samples)
	}
	hits := 0 // the node's cache serves these without the link
	if r.Cache != nil {
		hits = r.Cache.Hits
	}
	if bytes > r.BytesReceived || r.Samples > hits && (r.BytesReceived <= 0 || bytes <= 0) {
		t.Errorf("epoch %d: bytes received %d, by split %d", r.Epoch, r.BytesReceived, bytes)
	}
	if r.Samples > hits && (r.LinkFirstSeconds <= 0 || r.LinkLastSeconds < r.LinkFirstSeconds || r.LinkLastSeconds > r.Seconds+0.01) {
		t.Errorf("epoch %d: link from %v s to %v s of %v s", r.Epoch, r.LinkFirstSeconds, r.LinkLastSeconds, r.Seconds)
	}
	if r.Samples+r.SamplesFailed != r.Shard || r.SamplesFailed != len(r.Failed) {
		t.Errorf("epoch %d: samples %d + failed %d (list %d) != shard %d", r.Epoch, r.Samples, r.SamplesFailed, len(r.Failed), r.Shard)
	}
	if r.Seconds <= 0 || r.GPUIdleFraction < 0 || r.GPUIdleFraction > 1 {
		t.Errorf("epoch %d: seconds %v, gpu idle fraction %v", r.Epoch, r.Seconds, r.GPUIdleFraction)
	}
	if r.Samples > 0 && r.ComputeCPUSeconds <= 0 {
		t.Errorf("epoch %d: compute cpu seconds %v", r.Epoch, r.ComputeCPUSeconds)
	}
	if r.Duplicates != 0 {
		t.Errorf("epoch %d: %d duplicates", r.Epoch, r.Duplicates)
	}
}

func TestExactlyOncePerEpoch(t *testing.T) {
	n := &enginetest.MemNet{}
	s1, s2 := enginetest.NewStorage(t, "s1"), enginetest.NewStorage(t, "s2")
	n.Serve(t, "s1:1", s1)
	n.Serve(t, "s2:1", s2)
	cfg, rec := testConfig(t, n, "s1:1", "s2:1")
	cfg.Epochs = 2
	cfg.Plan = planner.NoOff()
	cfg.ReportPath = filepath.Join(t.TempDir(), "report.jsonl")
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 2 {
		t.Fatalf("got %d reports, want 2", len(reports))
	}
	for e := range uint64(2) {
		checkOnce(t, rec.epoch(e), allSamples())
		checkReport(t, reports[e])
		if reports[e].Epoch != e || reports[e].Plan != "nooff" || reports[e].Pipeline != cfg.Pipeline.ID() {
			t.Errorf("report %d: epoch %d plan %q pipeline %q", e, reports[e].Epoch, reports[e].Plan, reports[e].Pipeline)
		}
		if got := reports[e].BySplit; len(got) != 1 || got[0].Split != 0 {
			t.Errorf("epoch %d by split %+v, want split 0 only", e, got)
		}
		if reports[e].StorageCPUSeconds <= 0 {
			t.Errorf("epoch %d: storage cpu seconds %v", e, reports[e].StorageCPUSeconds)
		}
	}
	if s1.Responses() == 0 || s2.Responses() == 0 {
		t.Errorf("responses %d and %d: want both storage agents used", s1.Responses(), s2.Responses())
	}
	f, err := os.Open(cfg.ReportPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		var r report.EpochReport
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("report line %d: %v", lines, err)
		}
		if r.Epoch != uint64(lines) || r.Samples != enginetest.Samples {
			t.Errorf("report line %d: epoch %d samples %d", lines, r.Epoch, r.Samples)
		}
		lines++
	}
	if lines != 2 {
		t.Errorf("report file has %d lines, want 2", lines)
	}
}

func TestPlacementInvariance(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s1:1", enginetest.NewStorage(t, "s1"))
	n.Serve(t, "s2:1", enginetest.NewStorage(t, "s2"))
	p := enginetest.Pipeline(t)
	resize, err := planner.ResizeOff(p)
	if err != nil {
		t.Fatal(err)
	}
	splits := map[uint64]int{}
	for s := range uint64(enginetest.Samples) {
		splits[s] = int(s % uint64(p.Len()+1))
	}
	mixed := planner.PlanOf("mixed", p.ID(), 1, splits)
	plans := []*policy.Plan{planner.NoOff(), planner.AllOff(p), resize, mixed}
	var ref map[uint64][32]byte
	for _, plan := range plans {
		cfg, rec := testConfig(t, n, "s1:1", "s2:1")
		cfg.Plan = plan
		cfg.FirstEpoch = 3
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatalf("%s: %v", plan.Policy, err)
		}
		checkReport(t, reports[0])
		got := rec.epoch(3)
		checkOnce(t, got, allSamples())
		m := map[uint64][32]byte{}
		for _, d := range got {
			m[d.sample] = d.sha
		}
		if ref == nil {
			ref = m
			continue
		}
		if !maps.Equal(m, ref) {
			for s := range ref {
				if m[s] != ref[s] {
					t.Errorf("%s: sample %d (split %d) differs from nooff", plan.Policy, s, planSplit(plan, s))
				}
			}
		}
		wantSplits := 1
		if plan == mixed {
			wantSplits = p.Len() + 1
		}
		if len(reports[0].BySplit) != wantSplits {
			t.Errorf("%s: by split %+v, want %d splits", plan.Policy, reports[0].BySplit, wantSplits)
		}
	}
}

// corrupt returns a dataset whose sample bad is truncated JPEG bytes.
func corruptFake(t *testing.T, name string, bad uint64) *enginetest.Storage {
	s := enginetest.NewStorage(t, name)
	data := slices.Clone(s.Data)
	data[bad] = data[bad][:len(data[bad])/2]
	s.Data = data
	return s
}

func TestBadSample(t *testing.T) {
	const bad = 13
	p := enginetest.Pipeline(t)
	for _, tc := range []struct {
		plan  *policy.Plan
		where string
	}{{planner.NoOff(), "local"}, {planner.AllOff(p), "storage"}} {
		t.Run(tc.plan.Policy+"/fail", func(t *testing.T) {
			n := &enginetest.MemNet{}
			n.Serve(t, "s1:1", corruptFake(t, "s1", bad))
			cfg, _ := testConfig(t, n, "s1:1")
			cfg.Plan = tc.plan
			_, err := runAgent(t, cfg)
			if !errors.Is(err, ErrSample) || !strings.Contains(err.Error(), "sample 13 ") {
				t.Fatalf("got %v, want an ErrSample naming sample 13", err)
			}
		})
		t.Run(tc.plan.Policy+"/skip", func(t *testing.T) {
			n := &enginetest.MemNet{}
			n.Serve(t, "s1:1", corruptFake(t, "s1", bad))
			cfg, rec := testConfig(t, n, "s1:1")
			cfg.Plan = tc.plan
			cfg.OnError = OnErrorSkip
			cfg.Epochs = 2
			reports, err := runAgent(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.DeleteFunc(allSamples(), func(s uint64) bool { return s == bad })
			for e, r := range reports {
				checkOnce(t, rec.epoch(uint64(e)), want)
				checkReport(t, r)
				if len(r.Failed) != 1 || r.Failed[0].Sample != bad || r.Failed[0].Where != tc.where || r.Failed[0].Kind != "TRUNCATED" || r.Failed[0].Message == "" {
					t.Errorf("epoch %d failed %+v, want sample %d, %s, TRUNCATED", e, r.Failed, bad, tc.where)
				}
			}
		})
	}
}

// TestSlowSampleHeadOfLine: a sample the storage agent holds back does not
// hold the others up in completion order (every batch without it is
// consumed while it is held, and it trails), while strict order consumes
// nothing before it. The sample is released on events (the batches
// consumed; the responses sent), not after a delay.
func TestSlowSampleHeadOfLine(t *testing.T) {
	order := schedule.Order(7, 0, 0, 1, enginetest.Samples)
	slow := order[1] // early in the permutation: strict order waits for it
	for _, strict := range []bool{false, true} {
		t.Run(map[bool]string{false: "completion", true: "strict"}[strict], func(t *testing.T) {
			n := &enginetest.MemNet{}
			s := enginetest.NewStorage(t, "s1")
			hold := make(chan struct{})
			s.Hold = map[uint64]<-chan struct{}{slow: hold}
			cfg, rec := testConfig(t, n, "s1:1")
			cfg.StrictOrder = strict
			cfg.Window = 16
			cfg.Batch = 4
			free := (enginetest.Samples - 1) / cfg.Batch // full batches without the held sample
			var mu sync.Mutex
			consumed, whileHeld, released := 0, 0, false
			release := func(guard bool) {
				mu.Lock()
				defer mu.Unlock()
				if released {
					return
				}
				released, whileHeld = true, consumed
				if guard {
					t.Errorf("released by the guard after 60 s: %d batches consumed, want %d", consumed, free)
				}
				close(hold)
			}
			guard := time.AfterFunc(time.Minute, func() { release(true) }) // against a hang, not a measure
			defer guard.Stop()
			if strict {
				// Release once a window's other samples were answered.
				s.Sent = func(sent int64) {
					if sent >= int64(cfg.Window-1) {
						release(false)
					}
				}
			}
			n.Serve(t, "s1:1", s)
			cfg.Consumer = consumerFunc(func(ctx context.Context, b *Batch) error {
				mu.Lock()
				consumed++
				c := consumed
				mu.Unlock()
				if !strict && c == free {
					release(false)
				}
				return nil
			})
			if _, err := runAgent(t, cfg); err != nil {
				t.Fatal(err)
			}
			got := rec.epoch(0)
			checkOnce(t, got, allSamples())
			if !strict {
				if i := slices.IndexFunc(got, func(d delivery) bool { return d.sample == slow }); i < free*cfg.Batch {
					t.Errorf("held sample delivered %d-th of %d: it should trail", i, enginetest.Samples)
				}
				if whileHeld != free {
					t.Errorf("%d batches consumed while the sample was held, want all %d without it", whileHeld, free)
				}
				return
			}
			for i, d := range got {
				if d.sample != order[i] {
					t.Fatalf("strict: delivery %d is sample %d, want %d", i, d.sample, order[i])
				}
			}
			if whileHeld != 0 {
				t.Errorf("strict: %d batches consumed while the sample was held, want 0", whileHeld)
			}
		})
	}
}

type consumerFunc func(ctx context.Context, b *Batch) error

func (f consumerFunc) Consume(ctx context.Context, b *Batch) error { return f(ctx, b) }

func TestBackPressure(t *testing.T) {
	n := &enginetest.MemNet{}
	s := enginetest.NewStorage(t, "s1")
	n.Serve(t, "s1:1", s)
	cfg, _ := testConfig(t, n, "s1:1")
	cfg.Window, cfg.Batch, cfg.Queue, cfg.Workers = 4, 4, 1, 2
	release := make(chan struct{})
	cfg.Consumer = consumerFunc(func(ctx context.Context, b *Batch) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	var wg sync.WaitGroup
	var err error
	var reps []report.EpochReport
	wg.Go(func() { reps, err = runAgent(t, cfg) })
	time.Sleep(300 * time.Millisecond)
	// Held: window (4, workers included) + queue (1 batch) + the batch
	// being formed + the batch waiting to be handed over + the batch in
	// the consumer.
	bound := cfg.Window + cfg.Queue*cfg.Batch + 3*cfg.Batch
	issued := int(s.Requests())
	if issued > bound || issued >= enginetest.Samples {
		t.Errorf("with the consumer blocked %d requests went out, want at most %d", issued, bound)
	}
	close(release)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// The window is --window on a short link; it grows only by the
	// bandwidth x round trip an epoch measured (engine/link.go), which a
	// timed Info call on a loaded machine can make a few requests more:
	// the bound is the largest window an epoch reports.
	window := cfg.Window
	for _, r := range reps {
		if r.Link != nil {
			window = max(window, r.Link.WindowCount)
		}
	}
	if s.MaxInflight() > window {
		t.Errorf("max in flight %d, window %d (--window %d)", s.MaxInflight(), window, cfg.Window)
	}
}

func TestWindowBytes(t *testing.T) {
	n := &enginetest.MemNet{}
	s := enginetest.NewStorage(t, "s1")
	n.Serve(t, "s1:1", s)
	cfg, rec := testConfig(t, n, "s1:1")
	cfg.WindowBytes = 1 // one request at a time, however large
	if _, err := runAgent(t, cfg); err != nil {
		t.Fatal(err)
	}
	checkOnce(t, rec.epoch(0), allSamples())
	if s.MaxInflight() != 1 {
		t.Errorf("max in flight %d, want 1 under a 1-byte window", s.MaxInflight())
	}
}

func TestStreamFailureRetried(t *testing.T) {
	t.Run("reconnect", func(t *testing.T) {
		n := &enginetest.MemNet{}
		s := enginetest.NewStorage(t, "s1")
		s.FailAt = map[int64]bool{10: true, 30: true, 31: true}
		n.Serve(t, "s1:1", s)
		cfg, rec := testConfig(t, n, "s1:1")
		cfg.Plan = planner.AllOff(cfg.Pipeline)
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkOnce(t, rec.epoch(0), allSamples())
		checkReport(t, reports[0])
		if reports[0].StreamFailures < 2 || reports[0].Retried < 1 {
			t.Errorf("stream failures %d, retried %d: want the injected failures counted", reports[0].StreamFailures, reports[0].Retried)
		}
	})
	t.Run("failover", func(t *testing.T) {
		n := &enginetest.MemNet{}
		good, bad := enginetest.NewStorage(t, "good"), enginetest.NewStorage(t, "bad")
		bad.FailAlways = true
		n.Serve(t, "good:1", good)
		n.Serve(t, "bad:1", bad)
		cfg, rec := testConfig(t, n, "bad:1", "good:1")
		cfg.RetryBudget = time.Second
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkOnce(t, rec.epoch(0), allSamples())
		checkReport(t, reports[0])
		// The good agent may finish before the bad one's retries.
		if bad.Requests() == 0 || reports[0].StreamFailures < 1 {
			t.Errorf("bad agent saw %d requests, %d stream failures: want some", bad.Requests(), reports[0].StreamFailures)
		}
	})
	t.Run("all fail", func(t *testing.T) {
		n := &enginetest.MemNet{}
		bad := enginetest.NewStorage(t, "bad")
		bad.FailAlways = true
		n.Serve(t, "bad:1", bad)
		cfg, _ := testConfig(t, n, "bad:1")
		cfg.RetryBudget = 500 * time.Millisecond
		start := time.Now()
		if _, err := runAgent(t, cfg); !errors.Is(err, ErrNoStorage) {
			t.Fatalf("got %v, want ErrNoStorage", err)
		}
		if el := time.Since(start); el < cfg.RetryBudget || el > 10*cfg.RetryBudget {
			t.Errorf("gave up after %v, want about the retry budget %v", el, cfg.RetryBudget)
		}
	})
}

func TestDeadlineRetried(t *testing.T) {
	n := &enginetest.MemNet{}
	s := enginetest.NewStorage(t, "s1")
	s.Deadlines = map[uint64]int{3: 2, 9: 1, 40: 99}
	n.Serve(t, "s1:1", s)
	cfg, rec := testConfig(t, n, "s1:1")
	cfg.Retries = 3
	cfg.OnError = OnErrorSkip
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := reports[0]
	checkReport(t, r)
	// Samples 3 and 9 succeed on a retry; 40 keeps failing past the limit.
	checkOnce(t, rec.epoch(0), slices.DeleteFunc(allSamples(), func(s uint64) bool { return s == 40 }))
	if len(r.Failed) != 1 || r.Failed[0].Sample != 40 || r.Failed[0].Kind != "DEADLINE" || r.Retried != 2+1+3 {
		t.Errorf("failed %+v, retried %d: want sample 40 DEADLINE after 3 retries, 6 retries in all", r.Failed, r.Retried)
	}
}

// TestShardingAcrossRanks: ranks get the samples i % world == rank and the
// same count each (DDP hangs on uneven ones): padded by repeats of their
// own samples, counted in the report, or with drop-last cut to whole
// batches, so no sample is delivered twice.
func TestShardingAcrossRanks(t *testing.T) {
	for _, dropLast := range []bool{false, true} {
		n := &enginetest.MemNet{}
		n.Serve(t, "s1:1", enginetest.NewStorage(t, "s1"))
		const world = 3
		seen := map[uint64]int{}
		counts := map[int]int{}
		padded := 0
		for r := range world {
			cfg, rec := testConfig(t, n, "s1:1")
			cfg.Rank, cfg.World = r, world
			cfg.Trainer.DropLast = dropLast
			reports, err := runAgent(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkReport(t, reports[0])
			padded += reports[0].Padded
			for _, d := range rec.epoch(0) {
				if int(d.sample%world) != r {
					t.Errorf("rank %d got sample %d", r, d.sample)
				}
				seen[d.sample]++
				counts[r]++
			}
		}
		all := allSamples()
		if len(all)%world == 0 {
			t.Fatalf("%d samples split evenly over %d ranks: the test needs a remainder", len(all), world)
		}
		want := schedule.RankSamples(world, uint64(len(all)), 8, dropLast) // testConfig's batch
		extra := 0
		for r := range world {
			if counts[r] != want {
				t.Errorf("drop-last %v: rank %d got %d samples, want %d like every rank", dropLast, r, counts[r], want)
			}
		}
		for _, s := range all {
			switch c := seen[s]; {
			case c == 0 && !dropLast:
				t.Errorf("sample %d never delivered", s)
			case c > 1 && dropLast:
				t.Errorf("drop-last: sample %d delivered %d times", s, c)
			case c > 1:
				extra += c - 1
			}
		}
		if extra != padded || (!dropLast && padded == 0) {
			t.Errorf("drop-last %v: %d repeated deliveries, reports count %d padded", dropLast, extra, padded)
		}
	}
}

func TestFingerprintMismatch(t *testing.T) {
	n := &enginetest.MemNet{}
	good, other := enginetest.NewStorage(t, "good"), enginetest.NewStorage(t, "other")
	other.Fingerprint = "fp-other"
	n.Serve(t, "good:1", good)
	n.Serve(t, "other:1", other)
	cfg, rec := testConfig(t, n, "good:1", "other:1")
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkOnce(t, rec.epoch(0), allSamples())
	if other.Requests() != 0 || !slices.Equal(reports[0].Storage, []string{"good:1"}) {
		t.Errorf("mismatched agent got %d requests; storage used %v", other.Requests(), reports[0].Storage)
	}

	// An agent whose announced fingerprint is not what it serves.
	cfg, _ = testConfig(t, n)
	cfg.Discovery = StaticDiscovery{{Name: "other", Addr: "other:1", Fingerprint: "fp-announced"}}
	if _, err := runAgent(t, cfg); !errors.Is(err, ErrNoStorage) {
		t.Fatalf("got %v, want ErrNoStorage", err)
	}
}

func TestCodecs(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s1:1", enginetest.NewStorage(t, "s1"))
	var ref map[uint64][32]byte
	for _, c := range []string{"none", "zstd", "s2"} {
		cfg, rec := testConfig(t, n, "s1:1")
		codec, err := wireform.ParseCodec(c)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Codec = codec
		cfg.Plan = planner.AllOff(cfg.Pipeline)
		if _, err := runAgent(t, cfg); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		m := map[uint64][32]byte{}
		for _, d := range rec.epoch(0) {
			m[d.sample] = d.sha
		}
		if ref == nil {
			ref = m
		} else if !maps.Equal(ref, m) {
			t.Errorf("codec %s changes the tensors", c)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	n := &enginetest.MemNet{}
	base, _ := testConfig(t, n, "s1:1")
	for name, mut := range map[string]func(*Config){
		"no discovery":             func(c *Config) { c.Discovery = nil },
		"no pipeline":              func(c *Config) { c.Pipeline = nil },
		"rank":                     func(c *Config) { c.Rank, c.World = 3, 3 },
		"window":                   func(c *Config) { c.Window = -1 },
		"conns":                    func(c *Config) { c.Conns = MaxConns + 1 },
		"negative conns":           func(c *Config) { c.Conns = -1 },
		"receive window too small": func(c *Config) { c.RecvWindow = MinRecvWindow - 1 },
		"receive window too large": func(c *Config) { c.RecvWindow = MaxRecvWindow + 1 },
		"on-error":                 func(c *Config) { c.OnError = "ignore" },
		"split":                    func(c *Config) { c.Plan = planner.PlanOf("x", "", 9, nil) },
		"plan pipe":                func(c *Config) { c.Plan = planner.PlanOf("x", "other@1", 0, nil) },
		"tls":                      func(c *Config) { c.TLS = tlsconf.Files{Cert: "c"} },
		"neither tls nor insecure": func(c *Config) { c.Insecure = false },
		"gossip without a key": func(c *Config) {
			c.Discovery, c.Gossip.Bind, c.Insecure, c.TLS = nil, "127.0.0.1:0", false, tlsconf.Files{Cert: "c", Key: "k", CA: "a"}
		},
	} {
		c := base
		mut(&c.Config)
		if _, err := c.new(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
	a, err := New(Config{Discovery: Static("x:1"), Pipeline: base.Pipeline, GPU: noGPU{}, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	c := a.cfg
	if c.Window != DefaultWindow || c.WindowBytes != DefaultWindowBytes || c.Queue != DefaultQueue || c.Batch != DefaultBatch ||
		c.OnError != OnErrorFail || c.World != 1 || c.Epochs != 1 || c.Workers < 1 || c.Plan.Policy != "nooff" {
		t.Errorf("defaults not applied: %+v", c)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s1:1", enginetest.NewStorage(t, "s1"))
	n.Serve(t, "s2:1", enginetest.NewStorage(t, "s2"))
	base := runtime.NumGoroutine()
	cfg, _ := testConfig(t, n, "s1:1", "s2:1")
	cfg.Epochs = 2
	if _, err := runAgent(t, cfg); err != nil {
		t.Fatal(err)
	}
	// A failing epoch must not leak either.
	cfg.Plan = planner.PlanOf("bad", "", 0, map[uint64]int{5: 0})
	cfg.Consumer = consumerFunc(func(ctx context.Context, b *Batch) error { return errors.New("gpu fell over") })
	if _, err := runAgent(t, cfg); err == nil || !strings.Contains(err.Error(), "gpu fell over") {
		t.Fatalf("got %v, want the consumer's error", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFetchOnly runs link-test epochs: every sample is fetched and
// validated exactly once and nothing reaches the consumer.
func TestFetchOnly(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s1:1", enginetest.NewStorage(t, "s1"))
	for _, plan := range []*policy.Plan{planner.NoOff(), planner.AllOff(enginetest.Pipeline(t))} {
		cfg, rec := testConfig(t, n, "s1:1")
		cfg.Epochs = 2
		cfg.Plan = plan
		cfg.FetchOnly = true
		cfg.Consumer = consumerFunc(func(context.Context, *Batch) error {
			return errors.New("fetch-only epochs must not consume batches")
		})
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatalf("%s: %v", plan.Policy, err)
		}
		for e, r := range reports {
			checkOnce(t, rec.epoch(uint64(e)), allSamples())
			checkReport(t, r)
			if !r.FetchOnly || r.BytesReceived == 0 {
				t.Errorf("%s epoch %d: fetch_only %v, bytes %d", plan.Policy, e, r.FetchOnly, r.BytesReceived)
			}
		}
	}
	// The sha OnSample sees is the wire form's, so it differs by split.
	var shas [2]map[uint64][32]byte
	for i, plan := range []*policy.Plan{planner.NoOff(), planner.AllOff(enginetest.Pipeline(t))} {
		cfg, rec := testConfig(t, n, "s1:1")
		cfg.Plan = plan
		cfg.FetchOnly = true
		if _, err := runAgent(t, cfg); err != nil {
			t.Fatal(err)
		}
		shas[i] = map[uint64][32]byte{}
		for _, d := range rec.epoch(0) {
			shas[i][d.sample] = d.sha
		}
	}
	for s, sha := range shas[0] {
		if shas[1][s] == sha {
			t.Errorf("sample %d: raw and fully offloaded wire forms hash alike", s)
		}
	}
}

// TestCutAndFallbackInvariance: a plan that names the JPEG-domain crop
// (-1) beside every other split, served by storage agents that cut what
// they can and answer the rest raw, and that answer a third of the
// offloads raw (work-conserving offload), delivers the tensors No-Off
// does; the report counts the raw answers, and with --work-conserving=false
// no request asks for them.
func TestCutAndFallbackInvariance(t *testing.T) {
	p := enginetest.Pipeline(t)
	splits := map[uint64]int{}
	for s := range uint64(enginetest.Samples) {
		splits[s] = int(s%uint64(p.Len()+2)) - 1
	}
	mixed := planner.PlanOf("mixed-cut", p.ID(), 0, splits)
	// Photos large enough that most cuts are smaller than their file.
	big := bigPhotos(t)
	var ref map[uint64][32]byte
	for _, c := range []struct {
		name   string
		plan   *policy.Plan
		strict bool
	}{{"nooff", planner.NoOff(), false}, {"mixed", mixed, false}, {"strict", mixed, true}} {
		n := &enginetest.MemNet{}
		s1 := enginetest.NewStorage(t, "s1")
		s1.Data = big
		s1.Contended = func(sample uint64) bool { return sample%3 == 0 }
		n.Serve(t, "s1:1", s1)
		cfg, rec := testConfig(t, n, "s1:1")
		cfg.Plan = c.plan
		cfg.StrictOffload = c.strict
		cfg.FirstEpoch = 2
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := reports[0]
		checkReport(t, r)
		got := rec.epoch(2)
		checkOnce(t, got, allSamples())
		m := map[uint64][32]byte{}
		for _, d := range got {
			m[d.sample] = d.sha
		}
		if ref == nil {
			ref = m
			continue
		}
		for s := range ref {
			if m[s] != ref[s] {
				t.Errorf("%s: sample %d (split %d) differs from nooff", c.name, s, planSplit(mixed, s))
			}
		}
		contended, cuts := 0, 0
		if r.ServedRaw != nil {
			contended = r.ServedRaw.Contended
		}
		for _, b := range r.BySplit {
			if b.Split == ops.SplitCut {
				cuts = b.Samples
			}
		}
		t.Logf("%s: by split %+v, served raw %+v", c.name, r.BySplit, r.ServedRaw)
		if ops.JPEGBackend == "libjpeg-turbo" && cuts == 0 {
			t.Errorf("%s: no sample arrived cut", c.name)
		}
		if c.strict && contended != 0 {
			t.Errorf("%s: %d offloads answered raw without fallback", c.name, contended)
		}
		if !c.strict && contended == 0 {
			t.Errorf("%s: no offload answered raw; report %+v", c.name, r.ServedRaw)
		}
	}
}

// bigPhotos is enginetest.Samples photos large enough that most JPEG-domain cuts
// are smaller than their file.
func bigPhotos(t *testing.T) [][]byte {
	t.Helper()
	big := make([][]byte, enginetest.Samples)
	for i := range big {
		b, err := synth.JPEG(uint64(i), 200+8*(i%5), 160+8*(i%3), synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		big[i] = b
	}
	return big
}
