package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/ops/synth"
)

func runGen(_ context.Context, args []string, log zerolog.Logger) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	kind := fs.String("kind", "imagenet-like", "size distribution: imagenet-like or openimages-like")
	n := fs.Int("n", 256, "number of images")
	out := fs.String("out", "", "output folder (ImageFolder layout: one folder per class)")
	seed := fs.Uint64("seed", 1, "dataset seed: the same seed gives the same bytes")
	classes := fs.Int("classes", 4, "number of class folders")
	size := fs.String("size", "", "WxH: every image this size at default detail, instead of --kind's distribution")
	bombs := fs.Int("header-bombs", 0, "also write this many header-only 65535x65535 JPEGs (about 700 bytes each, bombNN.jpg) across the class folders: files every run refuses, for testing that a plan neither prices nor waits for them")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "testbed gen: write a deterministic photo-like JPEG dataset.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		fs.Usage()
		return fmt.Errorf("gen: --out is required")
	}
	if *n < 1 || *classes < 1 {
		return fmt.Errorf("gen: -n and --classes must be positive")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	start := time.Now()
	var paths []string
	var err error
	if *size != "" {
		var w, h int
		if _, err := fmt.Sscanf(*size, "%dx%d", &w, &h); err != nil || w < 1 || h < 1 {
			return fmt.Errorf("gen: --size %q is not WxH", *size)
		}
		paths, err = writeFixedSize(*out, *seed, *n, w, h)
	} else {
		var spec synth.Spec
		switch *kind {
		case "imagenet-like":
			spec = synth.ImageNetLike
		case "openimages-like":
			spec = synth.OpenImagesLike
		default:
			return fmt.Errorf("gen: unknown --kind %q (imagenet-like, openimages-like)", *kind)
		}
		paths, err = synth.WriteImageFolder(*out, spec, *seed, *n, *classes)
	}
	if err != nil {
		return err
	}
	bombPaths, err := writeHeaderBombs(*out, *bombs)
	if err != nil {
		return err
	}
	var total int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			total += st.Size()
		}
	}
	log.Info().Str("kind", *kind).Int("images", len(paths)).Int("header_bombs", len(bombPaths)).Str("out", *out).
		Float64("mean_kb", float64(total)/float64(len(paths))/1000).
		Str("took", time.Since(start).Round(time.Millisecond).String()).Msg("dataset written")
	return nil
}

// writeHeaderBombs writes n header bombs (hostile.HeaderBomb) into dir's
// class folders in turn, bomb00.jpg, bomb01.jpg, ...
func writeHeaderBombs(dir string, n int) ([]string, error) {
	if n <= 0 {
		return nil, nil
	}
	classes, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		return nil, err
	}
	classes = slices.DeleteFunc(classes, func(p string) bool {
		st, err := os.Stat(p)
		return err != nil || !st.IsDir()
	})
	if len(classes) == 0 {
		classes = []string{dir}
	}
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(classes[i%len(classes)], fmt.Sprintf("bomb%02d.jpg", i))
		if err := os.WriteFile(paths[i], hostile.HeaderBomb(65535, 65535), 0o644); err != nil {
			return nil, fmt.Errorf("gen: %w", err)
		}
	}
	return paths, nil
}

// writeFixedSize writes n images of w x h, one folder, default settings.
func writeFixedSize(dir string, seed uint64, n, w, h int) ([]string, error) {
	paths := make([]string, n)
	for i := range paths {
		b, err := synth.JPEG(seed+uint64(i), w, h, synth.Options{})
		if err != nil {
			return nil, err
		}
		paths[i] = filepath.Join(dir, fmt.Sprintf("img%05d.jpg", i))
		if err := os.WriteFile(paths[i], b, 0o644); err != nil {
			return nil, err
		}
	}
	return paths, nil
}
