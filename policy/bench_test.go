package policy

import (
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/sophon-dl/sophon/policy/synthetic"
	"github.com/sophon-dl/sophon/profiler"
)

var (
	bench1M     *profiler.Profile
	bench1MOnce sync.Once
)

func profile1M() *profiler.Profile {
	bench1MOnce.Do(func() { bench1M = synthetic.Profile("openimages-like", 1_000_000, 7) })
	return bench1M
}

// BenchmarkPlan1M plans a 1,000,000-sample OpenImages-like profile with
// storage CPU limited (the harder, balanced case). B/op, all the memory a
// plan allocates, bounds the planner's own peak above the profile; the
// process's peak RSS and the heap obtained from the OS (HeapSys, which
// only grows with the live heap) are reported beside it, profile included.
func BenchmarkPlan1M(b *testing.B) {
	p := profile1M()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	profileMiB := float64(ms.HeapAlloc) / (1 << 20)
	r := ample
	r.StorageCores = 0.5 // about what limited(SOPHON) gives this profile
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"optimal", func() { one(Optimal, p, r) }},
		{"optimal-ample", func() { one(Optimal, p, ample) }},
		{"bound", func() { bound1(p, r) }},
		{"sophon", func() { one(SOPHON, p, r) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.f()
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			var ru syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
				// Linux reports Maxrss in KiB: the process's peak, profile
				// included.
				b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MiB")
			}
			b.ReportMetric(float64(ms.HeapSys)/(1<<20), "heap-sys-MiB")
			b.ReportMetric(profileMiB, "profile-MiB")
			b.ReportMetric(float64(len(p.Samples))*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

var (
	benchIN     *profiler.Profile
	benchINOnce sync.Once
)

// profileImageNet is a 1,281,167-sample ImageNet-like profile (the size
// of ImageNet's training set).
func profileImageNet() *profiler.Profile {
	benchINOnce.Do(func() { benchIN = synthetic.Profile("imagenet-like", 1_281_167, 11) })
	return benchIN
}

// BenchmarkPlanImageNet plans an ImageNet-sized profile with Optimal and
// Bound, storage CPU limited to a quarter of what SOPHON keeps busy (the
// balanced case, where the dual search and the improvement pass work
// hardest), without and with the cut's measurements (one more option per
// sample).
func BenchmarkPlanImageNet(b *testing.B) {
	p := profileImageNet()
	pc := synthetic.WithCut(p, 1)
	r := limited(one(SOPHON, p, ample))
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"optimal", func() { one(Optimal, p, r) }},
		{"bound", func() { bound1(p, r) }},
		{"optimal-cut", func() { one(Optimal, pc, r) }},
		{"bound-cut", func() { bound1(pc, r) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				c.f()
			}
			// CPU time, the garbage collector's included, is steadier than
			// wall time on a shared machine.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(len(p.Samples))*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// processCPU is the process's user and system CPU time so far, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
