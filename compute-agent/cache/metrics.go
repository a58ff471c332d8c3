package cache

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the cache's Prometheus series, read from the store get
// returns (nil, before the cache opens: zeros).
func Collectors(get func() *Store) []prometheus.Collector {
	stat := func(f func(Stats) float64) func() float64 {
		return func() float64 {
			if s := get(); s != nil {
				return f(s.Stats())
			}
			return 0
		}
	}
	counter := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, stat(f))
	}
	return []prometheus.Collector{
		counter("sophon_cache_hits_total", "Samples served from the node's cache (no link, no storage CPU).", func(s Stats) float64 { return float64(s.Hits) }),
		counter("sophon_cache_misses_total", "Samples the cache was to hold that were absent: fetched raw and filled.", func(s Stats) float64 { return float64(s.Misses) }),
		counter("sophon_cache_refills_total", "Cache entries found bad when read (corrupt, truncated, swapped, foreign, stale, forged): dropped, never served, fetched again.",
			func(s Stats) float64 { return float64(s.Refills) }),
		counter("sophon_cache_forged_total", "Cache entries whose checksum held but whose MAC did not (written without the cache's key): dropped, never served, fetched again; also in refills.",
			func(s Stats) float64 { return float64(s.Forged) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sophon_cache_degraded", Help: "1 when the node's cache turned itself off (unusable at start, full disk, vanished directory): epochs run without it."},
			stat(func(s Stats) float64 {
				if s.Degraded {
					return 1
				}
				return 0
			})),
		counter("sophon_cache_read_bytes_total", "Cache entry bytes read for the hits.", func(s Stats) float64 { return float64(s.ReadBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sophon_cache_bytes", Help: "Bytes resident in the node's cache."}, stat(func(s Stats) float64 { return float64(s.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sophon_cache_samples", Help: "Samples resident in the node's cache."}, stat(func(s Stats) float64 { return float64(s.Samples) })),
	}
}
