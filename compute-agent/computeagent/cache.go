package computeagent

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/policy"
)

// openCache opens the node's cache (Config.CacheDir) the first time an
// epoch needs it and gives it to the epoch engine; nil without one. A
// cache that cannot be used (directory, key file, index) is open but off
// (cache.Stats.Degraded, the epoch report's cache.degraded), after one
// warning: the epoch runs without it.
func (a *Agent) openCache() (*cache.Store, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache != nil || a.cfg.CacheDir == "" {
		return a.cache, nil
	}
	if a.closed {
		return nil, ErrClosed
	}
	build := a.cfg.CacheBuild
	if build == "" {
		build = cacheBuild()
	}
	s, err := cache.Open(cache.Options{Dir: a.cfg.CacheDir, Bytes: int64(a.cfg.CacheBytes), Policy: a.cfg.CachePolicy,
		MaxPayload: int64(a.cfg.MaxPayload), KeyFile: a.cfg.CacheKeyFile, Build: build, Log: a.log})
	if err != nil {
		return nil, configErr("%v", err)
	}
	st := s.Stats()
	a.log.Info().Str("dir", s.Dir()).Int64("budget_bytes", s.Budget()).Bool("lru", s.LRU()).
		Int("resident_samples", st.Samples).Int64("resident_bytes", st.Bytes).Bool("degraded", st.Degraded).Str("build", build).Msg("cache open")
	a.cache = s
	a.engine.Cache = s
	a.cachePtr.Store(s)
	return s, nil
}

// plannedCacheBytes is the budget the planner plans under: the cache's
// with the planned policy (residency), or with the LRU cache under the lru
// policy (whose prediction counts the hits an LRU of that budget gets,
// policy.LRU), else 0.
func (a *Agent) plannedCacheBytes() float64 {
	if a.cfg.CacheDir == "" || a.cfg.CachePolicy == cache.PolicyLRU && a.cfg.Policy != policy.NameLRU {
		return 0
	}
	return float64(a.cfg.CacheBytes)
}

// cacheCollectors are the cache's Prometheus series, read from the store
// get returns (nil: zeros).
func cacheCollectors(get func() *cache.Store) []prometheus.Collector {
	stat := func(f func(cache.Stats) float64) func() float64 {
		return func() float64 {
			if s := get(); s != nil {
				return f(s.Stats())
			}
			return 0
		}
	}
	counter := func(name, help string, f func(cache.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, stat(f))
	}
	return []prometheus.Collector{
		counter("sophon_cache_hits_total", "Samples served from the node's cache (no link, no storage CPU).", func(s cache.Stats) float64 { return float64(s.Hits) }),
		counter("sophon_cache_misses_total", "Samples the cache was to hold that were absent: fetched raw and filled.", func(s cache.Stats) float64 { return float64(s.Misses) }),
		counter("sophon_cache_refills_total", "Cache entries found bad when read (corrupt, truncated, swapped, foreign, stale): dropped, never served, fetched again.",
			func(s cache.Stats) float64 { return float64(s.Refills) }),
		counter("sophon_cache_forged_total", "Cache entries whose checksum held but whose MAC did not (written without the cache's key): dropped, never served, fetched again; also in refills.",
			func(s cache.Stats) float64 { return float64(s.Forged) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sophon_cache_degraded", Help: "1 when the node's cache turned itself off (unusable at start, full disk, vanished directory): epochs run without it."},
			stat(func(s cache.Stats) float64 {
				if s.Degraded {
					return 1
				}
				return 0
			})),
		counter("sophon_cache_read_bytes_total", "Cache entry bytes read for the hits.", func(s cache.Stats) float64 { return float64(s.ReadBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sophon_cache_bytes", Help: "Bytes resident in the node's cache."}, stat(func(s cache.Stats) float64 { return float64(s.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sophon_cache_samples", Help: "Samples resident in the node's cache."}, stat(func(s cache.Stats) float64 { return float64(s.Samples) })),
	}
}

// cacheBuild names the build of the op library and codec running here,
// which keys the cache's finished outputs (cache.Options.Build), so that
// an upgrade that changes numerics never serves old tensors: the JPEG
// backend and the Go toolchain, the executable's Go build ID (a hash of
// everything linked into it, package ops included; the whole file's
// SHA-256 when it has none), and the SHA-256 of each shared JPEG library
// mapped into the process (libjpeg-turbo is linked dynamically: upgrading
// it changes numerics without touching the binary). Computed once.
var cacheBuild = sync.OnceValue(func() string {
	h := sha256.New()
	io.WriteString(h, jpeg.Backend+"\x00"+runtime.Version()+"\x00")
	if exe, err := os.Executable(); err == nil {
		h.Write(goBuildID(exe))
	}
	for _, lib := range mappedJPEGLibs() {
		io.WriteString(h, lib+"\x00")
		h.Write(fileSHA(lib))
	}
	return jpeg.Backend + " " + runtime.Version() + " " + hex.EncodeToString(h.Sum(nil)[:12])
})

// goBuildID is the Go build ID note of executable exe, or the SHA-256 of
// the whole file when it has none.
func goBuildID(exe string) []byte {
	if f, err := elf.Open(exe); err == nil {
		defer f.Close()
		if sec := f.Section(".note.go.buildid"); sec != nil && sec.Size < 1<<16 {
			if b, err := sec.Data(); err == nil {
				return b
			}
		}
	}
	return fileSHA(exe)
}

// fileSHA is the SHA-256 of file path (nil when it cannot be read).
func fileSHA(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, 1<<30)); err != nil {
		return nil
	}
	return h.Sum(nil)
}

// mappedJPEGLibs are the files mapped into the process whose names hold
// "jpeg" (Linux's /proc/self/maps; none elsewhere), sorted.
func mappedJPEGLibs() []string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	var libs []string
	sc := bufio.NewScanner(io.LimitReader(f, 16<<20))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") || !strings.Contains(filepath.Base(fields[5]), "jpeg") {
			continue
		}
		if !slices.Contains(libs, fields[5]) {
			libs = append(libs, fields[5])
		}
	}
	slices.Sort(libs)
	return libs
}
