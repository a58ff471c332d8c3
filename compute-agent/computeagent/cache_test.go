package computeagent

import (
	"context"
	"fmt"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/policy"
)

// valSpec is a small deterministic pipeline (imagenet-val's shape): its
// cache keeps finished outputs.
var valSpec = ops.Spec{Name: "test-val", Ops: []ops.OpSpec{
	{Op: "decode"},
	{Op: "resize", Size: []int{32}},
	{Op: "center_crop", Size: []int{24, 24}},
	{Op: "to_tensor"},
	{Op: "normalize", Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}},
}}

// cachedPlan is a plan file's plan keeping the even samples resident.
func cachedPlan(t *testing.T, p *ops.Pipeline) *Config {
	t.Helper()
	var ids []string
	for i := 0; i < enginetest.Samples; i += 2 {
		ids = append(ids, fmt.Sprint(i))
	}
	plan, err := planner.DecodePlanFile([]byte(`{"pipeline":"`+p.ID()+`","default":0,"cached":[`+strings.Join(ids, ",")+`]}`), "cached")
	if err != nil {
		t.Fatal(err)
	}
	return &Config{Plan: plan}
}

// cacheRun runs epochs [first, first+n) with the cache in dir (none when
// empty) and returns the reports and the tensors' hashes by epoch and
// sample; opts adjust the configuration.
func cacheRun(t *testing.T, n *enginetest.MemNet, p *ops.Pipeline, dir, policy string, first uint64, epochs int, opts ...func(*testSetup)) ([]report.EpochReport, map[[2]uint64][32]byte) {
	t.Helper()
	cfg, rec := testConfig(t, n, "s:1")
	cfg.Pipeline = p
	cfg.Plan = cachedPlan(t, p).Plan
	cfg.FirstEpoch, cfg.Epochs = first, epochs
	if dir != "" {
		cfg.CacheDir, cfg.CacheBytes, cfg.CachePolicy = dir, 64<<20, policy
	}
	for _, o := range opts {
		o(&cfg)
	}
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	shas := map[[2]uint64][32]byte{}
	for e := first; e < first+uint64(epochs); e++ {
		got := rec.epoch(e)
		if len(got) != enginetest.Samples {
			t.Fatalf("epoch %d: %d samples delivered, want %d", e, len(got), enginetest.Samples)
		}
		for _, d := range got {
			k := [2]uint64{e, d.sample}
			if _, dup := shas[k]; dup {
				t.Fatalf("epoch %d: sample %d delivered twice", e, d.sample)
			}
			shas[k] = d.sha
		}
	}
	return reports, shas
}

func sameTensors(t *testing.T, got, want map[[2]uint64][32]byte) {
	t.Helper()
	for k, sha := range got {
		if want[k] != sha {
			t.Fatalf("epoch %d sample %d: tensor differs from the run without cache", k[0], k[1])
		}
	}
}

// TestCachePlanned: the plan's resident samples are fetched raw and filled
// in epoch 0, read locally from then on, also by a restarted agent; bad
// entries (corrupt, truncated, swapped, stale) are never served, they are
// refetched and counted; tensors are the run without cache's.
func TestCachePlanned(t *testing.T) {
	for _, spec := range []ops.Spec{enginetest.Spec, valSpec} {
		t.Run(spec.Name, func(t *testing.T) {
			n, p, fake := cacheNet(t, spec)
			_, want := cacheRun(t, n, p, "", "", 0, 4)
			dir := filepath.Join(t.TempDir(), "cache")
			before := fake.Requests()
			reports, got := cacheRun(t, n, p, dir, "", 0, 2)
			if sent := fake.Requests() - before; sent != enginetest.Samples+enginetest.Samples/2 {
				t.Errorf("the storage agent got %d requests, want %d: hits must not reach it", sent, enginetest.Samples+enginetest.Samples/2)
			}
			sameTensors(t, got, want)
			half := enginetest.Samples / 2
			c0, c1 := reports[0].Cache, reports[1].Cache
			if c0 == nil || c0.Split != p.CacheSplit() || c0.Misses != half || c0.Fills != half || c0.Hits != 0 || c0.ResidentSamples != half {
				t.Fatalf("epoch 0 cache %+v, want %d misses and fills at split %d", c0, half, p.CacheSplit())
			}
			if c1.Hits != half || c1.Misses != 0 || c1.Refills != 0 || c1.ReadBytes <= 0 {
				t.Fatalf("epoch 1 cache %+v, want %d hits", c1, half)
			}
			if reports[1].BytesReceived >= reports[0].BytesReceived {
				t.Errorf("epoch 1 received %d bytes, epoch 0 %d: the hits crossed the link", reports[1].BytesReceived, reports[0].BytesReceived)
			}
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("cache dir: %v %v", fi.Mode(), err)
			}
			// Damage three entries and plant a foreign one; a restarted
			// agent reuses the rest and refills those.
			ents, _ := filepath.Glob(filepath.Join(dir, "*.entry"))
			damage(t, ents[0], func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b })
			damage(t, ents[1], func(b []byte) []byte { return b[:len(b)-7] })
			swap, _ := os.ReadFile(ents[3])
			damage(t, ents[2], func([]byte) []byte { return swap })
			reports, got = cacheRun(t, n, p, dir, "", 2, 2)
			sameTensors(t, got, want)
			c2, c3 := reports[0].Cache, reports[1].Cache
			if c2.Refills != 3 || c2.Hits != half-3 || c2.Fills != 3 {
				t.Fatalf("after damage: cache %+v, want 3 refills and %d hits", c2, half-3)
			}
			if c3.Hits != half || c3.Refills != 0 {
				t.Fatalf("after refill: cache %+v, want %d hits", c3, half)
			}
		})
	}
}

func damage(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCacheLRU: under the LRU policy every raw fetch goes through the
// cache, within its budget.
func TestCacheLRU(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s:1", enginetest.NewStorage(t, "s"))
	p := enginetest.Pipeline(t)
	cfg, _ := testConfig(t, n, "s:1")
	cfg.Epochs = 2
	cfg.CacheDir, cfg.CachePolicy = t.TempDir(), cache.PolicyLRU
	var total int64
	for _, b := range enginetest.Dataset(t) {
		total += int64(len(b))
	}
	cfg.CacheBytes = cache.Size(total / 2)
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c0, c1 := reports[0].Cache, reports[1].Cache
	if c0 == nil || c0.Policy != cache.PolicyLRU || c0.Wanted != enginetest.Samples || c0.Misses != enginetest.Samples || c0.ResidentBytes > total/2 {
		t.Fatalf("epoch 0 lru %+v", c0)
	}
	if c1.Hits == 0 || c1.Hits == enginetest.Samples || c1.Hits+c1.Misses != enginetest.Samples {
		t.Fatalf("epoch 1 lru %+v: want some hits, not all", c1)
	}
	_ = p
}

// TestCacheDegrade: a cache directory that vanishes mid-run degrades to no
// cache; the epochs still deliver every sample.
func TestCacheDegrade(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s:1", enginetest.NewStorage(t, "s"))
	p := enginetest.Pipeline(t)
	dir := filepath.Join(t.TempDir(), "c")
	cfg, rec := testConfig(t, n, "s:1")
	cfg.Plan = cachedPlan(t, p).Plan
	cfg.CacheDir, cfg.CacheBytes = dir, 64<<20
	cfg.Epochs = 3
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.RunEpoch(ctx, 0); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	for e := uint64(1); e < 3; e++ {
		r, err := a.RunEpoch(ctx, e)
		if err != nil {
			t.Fatalf("epoch %d failed for its cache: %v", e, err)
		}
		if len(rec.epoch(e)) != enginetest.Samples || r.SamplesFailed != 0 {
			t.Fatalf("epoch %d: %d delivered, %d failed", e, len(rec.epoch(e)), r.SamplesFailed)
		}
		if e == 2 && (r.Cache == nil || !r.Cache.Degraded || r.Cache.Hits != 0) {
			t.Fatalf("epoch 2 cache %+v, want degraded", r.Cache)
		}
	}
}

// TestCacheKilledMidFill: an agent stopped in the middle of its first
// epoch, with a write's temp file left behind, leaves a cache that a
// restarted agent reuses: hits for what was filled, no partial entry
// served, tensors unchanged; the metrics count them.
func TestCacheKilledMidFill(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s:1", enginetest.NewStorage(t, "s"))
	p := enginetest.Pipeline(t)
	_, want := cacheRun(t, n, p, "", "", 0, 1)
	dir := filepath.Join(t.TempDir(), "c")

	cfg, _ := testConfig(t, n, "s:1")
	cfg.Plan = cachedPlan(t, p).Plan
	cfg.CacheDir, cfg.CacheBytes = dir, 64<<20
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	delivered := 0
	cfg.OnSample = func(uint64, uint64, [32]byte) {
		if delivered++; delivered == enginetest.Samples/2 {
			cancel()
		}
	}
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunEpoch(ctx, 0); err == nil {
		t.Fatal("the stopped epoch completed")
	}
	// As after a kill: no index, and a write's temp file left behind.
	a.Close()
	os.Remove(filepath.Join(dir, "index"))
	filled, _ := filepath.Glob(filepath.Join(dir, "*.entry"))
	if len(filled) == 0 || len(filled) >= enginetest.Samples/2 {
		t.Fatalf("%d entries after half an epoch", len(filled))
	}
	os.WriteFile(filepath.Join(dir, ".tmp-0123-partial.entry"), []byte("SPHXCACH half"), 0o600)

	reports, got := cacheRun(t, n, p, dir, "", 0, 1)
	sameTensors(t, got, want)
	c := reports[0].Cache
	if c.Hits != len(filled) || c.Refills != 0 || c.Hits+c.Misses != enginetest.Samples/2 {
		t.Fatalf("after restart: cache %+v, want %d hits", c, len(filled))
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-0123-partial.entry")); err == nil {
		t.Fatal("a write's temp file survived the restart")
	}
}

// TestCacheMetrics: the cache's series are served.
func TestCacheMetrics(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s:1", enginetest.NewStorage(t, "s"))
	cfg, _ := testConfig(t, n, "s:1")
	cfg.Plan = cachedPlan(t, enginetest.Pipeline(t)).Plan
	cfg.CacheDir, cfg.CacheBytes = t.TempDir(), 64<<20
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for e := range uint64(2) {
		if _, err := a.RunEpoch(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	a.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, line := range []string{"sophon_cache_hits_total 32", "sophon_cache_misses_total 32", "sophon_cache_refills_total 0", "sophon_cache_forged_total 0", "sophon_cache_degraded 0", "sophon_cache_read_bytes_total ", "sophon_cache_bytes "} {
		if !strings.Contains(body, line) {
			t.Errorf("metrics lack %q", line)
		}
	}
}

// TestCacheWarmEpoch: a policy run's profiling epoch (no plan yet) fills
// the planned cache with what it fetches raw anyway, and the planner plans
// under the cache budget; a static policy's run does not fill it.
func TestCacheWarmEpoch(t *testing.T) {
	for _, c := range []struct {
		policy string
		fills  int
	}{{policy.NameSOPHON, policySamples}, {policy.NameNoOff, 0}} {
		cfg, _ := policyConfig(t, c.policy, constBPS(1e6), 1)
		cfg.CacheDir, cfg.CacheBytes = t.TempDir(), 64<<20
		// Under -race beside other tests stage 1 can time the compute
		// side slower than the link and skip stage 2: profile regardless.
		cfg.ForceProfile = true
		reports, err := runAgent(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := reports[0]
		got := 0
		if r.Cache != nil {
			got = r.Cache.Fills
		}
		if got != c.fills || !r.Profiled {
			t.Errorf("%s: profiling epoch filled %d entries (cache %+v), want %d", c.policy, got, r.Cache, c.fills)
		}
	}
}

// stallEpoch is a consumer that holds epoch's first batch until release
// closes (or ctx ends).
type stallEpoch struct {
	epoch   uint64
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *stallEpoch) Consume(ctx context.Context, b *Batch) error {
	if b.Epoch == s.epoch {
		s.once.Do(func() { close(s.held) })
		select {
		case <-s.release:
		case <-ctx.Done():
		}
	}
	return ctx.Err()
}

// TestCacheHitsDoNotHoldRequests: a cache hit waiting for a worker does
// not hold back the requests after it. With the consumer stalled, the
// workers stop, and every miss of the epoch still reaches the storage
// agent (the window allows them all), so that a storage agent can work
// ahead of the link while the compute node finishes hits.
func TestCacheHitsDoNotHoldRequests(t *testing.T) {
	n := &enginetest.MemNet{}
	fake := enginetest.NewStorage(t, "s")
	n.Serve(t, "s:1", fake)
	p := enginetest.Pipeline(t)
	cfg, _ := testConfig(t, n, "s:1")
	cfg.Plan = cachedPlan(t, p).Plan
	cfg.Epochs = 2
	cfg.Window = enginetest.Samples
	cfg.CacheDir, cfg.CacheBytes = t.TempDir(), 64<<20
	stall := &stallEpoch{epoch: 1, held: make(chan struct{}), release: make(chan struct{})}
	cfg.Consumer = stall
	want := int64(enginetest.Samples + enginetest.Samples/2) // epoch 0 fetches all, epoch 1 the misses
	done := make(chan error, 1)
	go func() {
		_, err := runAgent(t, cfg)
		done <- err
	}()
	select {
	case <-stall.held:
	case err := <-done:
		t.Fatalf("the run ended before epoch 1's first batch: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for fake.Requests() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	got := fake.Requests()
	close(stall.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("with the consumer stalled in epoch 1 the storage agent got %d requests, want %d: hits waiting for a worker held the misses back", got, want)
	}
}
