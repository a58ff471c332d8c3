package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/wireform"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/testbed"
)

func runOps(ctx context.Context, args []string, log zerolog.Logger) error {
	fs := flag.NewFlagSet("ops", flag.ContinueOnError)
	data := fs.String("data", "", "folder of JPEGs (searched recursively)")
	preset := fs.String("preset", "imagenet-train", "pipeline preset: "+fmt.Sprint(ops.PresetNames()))
	specFile := fs.String("spec", "", "pipeline spec file (YAML or JSON), or a preset name; overrides --preset")
	seed := fs.Uint64("seed", 1, "run seed for the ops' random draws")
	codecName := fs.String("codec", "zstd", "codec for the compressed-size column: none, zstd or s2")
	bench := fs.Float64("bench", 3, "seconds of single-core throughput measurement after the per-op table (0 skips it)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "testbed ops: per-op output sizes and costs of a pipeline over a folder of JPEGs,\nthen its throughput on one core.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *data == "" {
		fs.Usage()
		return fmt.Errorf("ops: --data is required")
	}
	name := *preset
	if *specFile != "" {
		name = *specFile
	}
	codec, err := wireform.ParseCodec(*codecName)
	if err != nil {
		return err
	}
	p, err := ops.LoadPipeline(name)
	if err != nil {
		return err
	}
	paths, err := testbed.ListJPEGs(*data)
	if err != nil {
		return err
	}
	samples, err := readAll(paths, *data)
	if err != nil {
		return err
	}

	// Pass 1: every op of every sample, one at a time.
	var traces []profiler.SampleTrace
	failed := 0
	for i, raw := range samples {
		t, err := profiler.Trace(p, ops.Key{Seed: *seed, Sample: uint64(i)}, raw, codec)
		if err != nil {
			failed++
			log.Warn().Str("path", paths[i]).Err(err).Msg("sample failed")
			continue
		}
		traces = append(traces, t)
	}
	fmt.Printf("pipeline %s over %d JPEGs in %s (%d failed), decoder %s\n\n", p.ID(), len(samples), *data, failed, ops.JPEGBackend)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "split k\tafter op\tmean bytes\tvs raw\t%s ratio\tsmaller than raw\top ms\tprefix ms (storage CPU)\t\n", codec)
	sum := profiler.Summarize(p, traces)
	for _, s := range sum {
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.2fx\t%.2fx\t%.0f%%\t%.3f\t%.3f\t\n", s.K, s.Name, s.MeanBytes,
			s.MeanBytes/sum[0].MeanBytes, s.MeanBytes/s.MeanCompressed, 100*s.Smaller, ms(s.MeanOpDur), ms(s.MeanPrefixDur))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if *bench <= 0 || len(traces) == 0 {
		return nil
	}

	throughput(ctx, p, samples, *seed, time.Duration(*bench*float64(time.Second)))
	return nil
}

// readAll reads the files at paths (the JPEGs under data).
func readAll(paths []string, data string) ([][]byte, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("ops: no JPEGs under %s", data)
	}
	samples := make([][]byte, len(paths))
	for i, path := range paths {
		var err error
		if samples[i], err = os.ReadFile(path); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// throughput is pass 2 of runOps: the whole pipeline over samples, as a
// worker runs it, on one goroutine, for d; it prints images per second.
func throughput(ctx context.Context, p *ops.Pipeline, samples [][]byte, seed uint64, d time.Duration) {
	deadline := time.Now().Add(d)
	start := time.Now()
	n := 0
	for epoch := uint64(1); time.Now().Before(deadline) && ctx.Err() == nil; epoch++ {
		for i, raw := range samples {
			if _, err := p.Run(ops.Key{Seed: seed, Epoch: epoch, Sample: uint64(i)}, ops.Encoded(raw), 0, p.Len()); err == nil {
				n++
			}
		}
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("\nthroughput: pipeline=%s images=%d seconds=%.2f img_per_s=%.1f (one goroutine)\n", p.Name(), n, secs, float64(n)/secs)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
