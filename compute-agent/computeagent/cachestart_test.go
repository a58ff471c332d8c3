package computeagent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops"
)

// valCache is the fake storage agent over net serving valSpec's pipeline
// (imagenet-val's shape: its cache keeps finished outputs).
func valCache(t *testing.T) (*enginetest.MemNet, *ops.Pipeline) {
	t.Helper()
	n, p, _ := cacheNet(t, valSpec)
	return n, p
}

// cacheNet is the fake storage agent over a MemNet serving spec's pipeline.
func cacheNet(t *testing.T, spec ops.Spec) (*enginetest.MemNet, *ops.Pipeline, *enginetest.Storage) {
	t.Helper()
	p, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	n := &enginetest.MemNet{}
	fake := enginetest.NewStorage(t, "s")
	fake.Pipe = p
	n.Serve(t, "s:1", fake)
	return n, p, fake
}

// TestCacheUnusableAtStart: a cache that cannot be used when the agent
// opens it (a read-only tmpfs of mode 1777, a --cache-dir under a regular
// file, a symlink loop that cannot be opened, an 8 GiB sparse index) does
// not fail the run: every epoch delivers every sample, with the tensors of
// a run without cache, after one warning, and the reports' cache says
// degraded. As root (which permission bits do not stop) the read-only
// directory is a read-only tmpfs mount; without root that case is skipped.
func TestCacheUnusableAtStart(t *testing.T) {
	n, p := valCache(t)
	_, want := cacheRun(t, n, p, "", "", 0, 2)
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"read-only-tmpfs-1777", func(t *testing.T) string {
			if os.Geteuid() != 0 {
				testutil.Require(t, "a read-only tmpfs mount needs root")
			}
			d := filepath.Join(t.TempDir(), "ro")
			os.Mkdir(d, 0o700)
			if err := syscall.Mount("tmpfs", d, "tmpfs", syscall.MS_RDONLY, "mode=1777"); err != nil {
				testutil.Require(t, "mount tmpfs: %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(d, syscall.MNT_DETACH) })
			return d
		}},
		{"under-a-regular-file", func(t *testing.T) string {
			f := filepath.Join(t.TempDir(), "file")
			os.WriteFile(f, []byte("x"), 0o600)
			return filepath.Join(f, "cache")
		}},
		{"unopenable-symlink-loop", func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "loop")
			if err := os.Symlink(d, d); err != nil {
				t.Fatal(err)
			}
			return d
		}},
		{"sparse-8GiB-index", func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "c")
			cacheRun(t, n, p, d, "", 0, 1)
			if err := os.Truncate(filepath.Join(d, "index"), 8<<30); err != nil {
				t.Fatal(err)
			}
			return d
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.dir(t)
			var log testutil.SyncBuffer
			reports, got := cacheRun(t, n, p, dir, "", 0, 2, func(cfg *testSetup) { cfg.Logger = zerolog.New(&log) })
			sameTensors(t, got, want)
			for e, r := range reports {
				if r.Cache == nil || !r.Cache.Degraded || r.Cache.Hits != 0 || r.SamplesFailed != 0 {
					t.Fatalf("epoch %d: cache %+v, %d failed; want degraded", e, r.Cache, r.SamplesFailed)
				}
			}
			if w := log.Lines(`"level":"warn"`, "cache"); len(w) != 1 || !strings.Contains(w[0], "cache degraded") {
				t.Fatalf("warnings %q, want one: the cache's", w)
			}
		})
	}
}

// TestCacheForgedFinished: an entry of a deterministic pipeline's finished
// output (imagenet-val's shape) rewritten to hold another sample's payload
// under a valid header and checksum, by someone who knows the format but
// not the agent's key, is detected, dropped, refetched and counted
// (report cache.forged, within refills); the sample's tensor is the run
// without cache's in every epoch, and the refilled entry serves again.
func TestCacheForgedFinished(t *testing.T) {
	n, p := valCache(t)
	_, want := cacheRun(t, n, p, "", "", 0, 3)
	dir := filepath.Join(t.TempDir(), "cache")
	cacheRun(t, n, p, dir, "", 0, 1) // fills the even samples' outputs
	key, err := os.ReadFile(cache.DefaultKeyFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	entry := func(sample string) string {
		m, _ := filepath.Glob(filepath.Join(dir, "*-"+sample+".entry"))
		if len(m) != 1 {
			t.Fatalf("entries of sample %s: %q", sample, m)
		}
		return m[0]
	}
	b, _ := os.ReadFile(entry("2"))
	h, other, err := cache.Decode(b, key, 0)
	if err != nil || h.Split != p.CacheSplit() {
		t.Fatalf("sample 2's entry: %+v, %v", h, err)
	}
	h.Sample = 0
	forged, err := cache.Encode(h, other, bytes.Repeat([]byte{0xee}, cache.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(entry("0"), forged, 0o600); err != nil {
		t.Fatal(err)
	}
	reports, got := cacheRun(t, n, p, dir, "", 1, 2)
	sameTensors(t, got, want)
	half := enginetest.Samples / 2
	c1, c2 := reports[0].Cache, reports[1].Cache
	if c1.Forged != 1 || c1.Refills != 1 || c1.Hits != half-1 || c1.Fills != 1 {
		t.Fatalf("epoch 1 cache %+v: want the forged entry dropped, counted and refilled", c1)
	}
	if c2.Forged != 0 || c2.Refills != 0 || c2.Hits != half {
		t.Fatalf("epoch 2 cache %+v: want every resident sample a hit", c2)
	}
}

// TestCacheBuildChange: finished outputs made by another build of the op
// library and codec (Knobs.CacheBuild; by default the binary's build ID
// and the JPEG library mapped) are misses after an upgrade, never served;
// they are refilled by the new build.
func TestCacheBuildChange(t *testing.T) {
	n, p := valCache(t)
	_, want := cacheRun(t, n, p, "", "", 0, 3)
	dir := filepath.Join(t.TempDir(), "cache")
	build := func(b string) func(*testSetup) { return func(cfg *testSetup) { cfg.CacheBuild = b } }
	cacheRun(t, n, p, dir, "", 0, 1, build("ops-1 libjpeg-turbo 2.1"))
	reports, got := cacheRun(t, n, p, dir, "", 1, 2, build("ops-2 libjpeg-turbo 3.0"))
	sameTensors(t, got, want)
	half := enginetest.Samples / 2
	c1, c2 := reports[0].Cache, reports[1].Cache
	if c1.Hits != 0 || c1.Misses != half || c1.Refills != 0 || c1.Fills != half {
		t.Fatalf("first epoch of the new build: cache %+v, want %d misses, no hit", c1, half)
	}
	if c2.Hits != half {
		t.Fatalf("second epoch of the new build: cache %+v, want %d hits", c2, half)
	}
	if b := cacheBuild(); b == "" || b != cacheBuild() {
		t.Fatalf("cacheBuild %q: want a stable name", b)
	}
}
