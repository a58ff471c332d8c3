package ops_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
)

// cutBenchItem is one sample of the cut benchmarks: its raw JPEG, key and
// cut (nil where the cut declines).
type cutBenchItem struct {
	raw []byte
	key ops.Key
	cut *ops.CutJPEG
}

// cutBenchItems cuts 4 photo-like 4:2:0 JPEGs of w x h for 16 epochs each.
func cutBenchItems(b *testing.B, p *ops.Pipeline, w, h int) []cutBenchItem {
	b.Helper()
	var items []cutBenchItem
	for seed := range uint64(4) {
		raw, err := synth.JPEG(200+seed, w, h, synth.Options{})
		if err != nil {
			b.Fatal(err)
		}
		for epoch := range uint64(16) {
			key := ops.Key{Seed: 1, Epoch: epoch, Sample: seed}
			cut, _ := p.Cut(key, ops.Encoded(raw), ops.Limits{})
			items = append(items, cutBenchItem{raw: raw, key: key, cut: cut})
		}
	}
	return items
}

// BenchmarkCut compares, per image, the storage side of the cut split (Cut)
// with the fused decode and crop it spares the storage agent (the run of
// ops[0:2] from split 0) and with the compute side's decode of the cut (the
// run from SplitCut to 2). cut-frac is the bytes the cut sends over the
// raw file's (a declined cut sends the file), declined-% how often the cut
// declines.
func BenchmarkCut(b *testing.B) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		w, h int
	}{{"1024x768", 1024, 768}, {"500x375", 500, 375}} {
		items := cutBenchItems(b, p, c.w, c.h)
		var sent, raw, declined int
		var cuts []cutBenchItem
		for _, it := range items {
			raw += len(it.raw)
			if it.cut == nil {
				sent += len(it.raw)
				declined++
				continue
			}
			sent += len(it.cut.Data)
			cuts = append(cuts, it)
		}
		if !cgoCut() {
			b.Logf("the %s build declines every cut", ops.JPEGBackend)
		}
		b.Run(fmt.Sprintf("cut/%s", c.name), func(b *testing.B) {
			i := 0
			for b.Loop() {
				it := items[i%len(items)]
				if _, err := p.Cut(it.key, ops.Encoded(it.raw), ops.Limits{}); err != nil && it.cut != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(sent)/float64(raw), "cut-frac")
			b.ReportMetric(100*float64(declined)/float64(len(items)), "declined-%")
		})
		b.Run(fmt.Sprintf("decode+crop/%s", c.name), func(b *testing.B) {
			i := 0
			for b.Loop() {
				it := items[i%len(items)]
				if _, err := p.Run(it.key, ops.Encoded(it.raw), 0, 2); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("finish/%s", c.name), func(b *testing.B) {
			if len(cuts) == 0 {
				b.Skip("no cuts")
			}
			i := 0
			for b.Loop() {
				it := cuts[i%len(cuts)]
				if _, err := p.Run(it.key, it.cut, ops.SplitCut, 2); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkCutDataset measures the cut on a dataset on disk, e.g. one that
// `testbed gen` wrote: SOPHON_CUT_DATASET names its folder (the benchmark
// skips without it). Iteration i takes file i mod n in epoch i / n, so
// -benchtime=600x covers 300 files twice. For each it runs, on one locked
// thread and timed by its CPU clock (time descheduled on a shared machine
// does not count), Cut, the fused decode and crop (ops[0:2] from split 0)
// and, where the cut succeeded, the run from SplitCut to 2, whose output
// must equal the fused run's. It reports the mean CPU milliseconds of each
// (finish: over the cuts), cut/decode+crop, the CPU ratio of the two, the
// bytes sent over the raw bytes (a declined cut sends the file), the mean
// bytes sent and read, and how often the cut declines.
func BenchmarkCutDataset(b *testing.B) {
	dir := os.Getenv("SOPHON_CUT_DATASET")
	if dir == "" {
		b.Skip("SOPHON_CUT_DATASET is not set")
	}
	var files [][]byte
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(strings.ToLower(path), ".jpg") {
			return err
		}
		data, err := os.ReadFile(path)
		files = append(files, data)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if len(files) == 0 {
		b.Fatalf("no .jpg files under %s", dir)
	}
	// WalkDir's lexical order makes file i the same on every run.
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cutCPU, decCPU, finCPU time.Duration
	var sent, raw, cuts, declined int
	i := 0
	for b.Loop() {
		data := files[i%len(files)]
		key := ops.Key{Seed: 1, Epoch: uint64(i / len(files)), Sample: uint64(i % len(files))}
		t0 := cpuclock.Thread()
		cut, cerr := p.Cut(key, ops.Encoded(data), ops.DefaultLimits())
		t1 := cpuclock.Thread()
		want, err := p.Run(key, ops.Encoded(data), 0, 2)
		t2 := cpuclock.Thread()
		if err != nil {
			b.Fatal(err)
		}
		cutCPU += t1 - t0
		decCPU += t2 - t1
		raw += len(data)
		if cerr != nil {
			sent += len(data)
			declined++
			i++
			continue
		}
		got, err := p.Run(key, cut, ops.SplitCut, 2)
		finCPU += cpuclock.Thread() - t2
		if err != nil {
			b.Fatal(err)
		}
		if !bytes.Equal(valueBytes(got), valueBytes(want)) {
			b.Fatalf("file %d epoch %d: the run from the cut differs", i%len(files), key.Epoch)
		}
		sent += len(cut.Data)
		cuts++
		i++
	}
	ms := func(d time.Duration, n int) float64 {
		return float64(d) / float64(time.Millisecond) / float64(max(n, 1))
	}
	b.ReportMetric(ms(cutCPU, i), "cut-cpu-ms")
	b.ReportMetric(ms(decCPU, i), "decode+crop-cpu-ms")
	b.ReportMetric(ms(finCPU, cuts), "finish-cpu-ms")
	b.ReportMetric(float64(cutCPU)/float64(decCPU), "cut/decode+crop")
	b.ReportMetric(float64(sent)/float64(raw), "cut-frac")
	b.ReportMetric(float64(sent)/float64(i), "sent-bytes")
	b.ReportMetric(float64(raw)/float64(i), "raw-bytes")
	b.ReportMetric(100*float64(declined)/float64(i), "declined-%")
}
