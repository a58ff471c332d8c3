package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/sophon-dl/sophon/internal/cli"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/s3src"
)

const indexUsage = `Usage: storage-agent index --data DIR|s3://BUCKET/PREFIX [--index FILE] [--manifest FILE] [--strict] [--workers N] [--progress 5s]

Indexes the dataset in DIR (or the bucket) exactly as the agent does at start-up, and
exits: it lists the samples, hashes those its index file lacks (in
parallel) and reads their JPEG headers, writes the index file where the
agent would (DIR/.sophon-index when DIR is writable, else the user cache
dir, or --index), and prints a summary. A later agent start with the same
--data and --index then hashes only what changed. While hashing, it logs
files/s, bytes/s and an ETA to stderr every --progress.

Flags:
`

// indexCmd is "storage-agent index".
func indexCmd(args []string, stdout io.Writer, stderr *os.File) int {
	fs := subcommand("storage-agent index", indexUsage, stderr)
	data := fs.String("data", "", "dataset `directory` or s3://BUCKET/PREFIX (ImageFolder or *.tar shards); required")
	index := fs.String("index", "", "content-hash index `file`, as the agent's --index")
	manifest := fs.String("manifest", "", "the whole dataset's manifest `file`, as the agent's --manifest")
	strict := fs.Bool("strict", false, "refuse the dataset on any bad entry, as the agent's --strict")
	workers := fs.Int("workers", 0, "samples hashed in parallel (default: one per CPU)")
	maxObjects := fs.Int("s3-max-objects", s3src.DefaultMaxObjects, "with an s3:// --data, the most `objects` listed, as the agent's --s3-max-objects")
	every := fs.Duration("progress", dataset.DefaultProgress, "how often to log the hashing's progress; negative never")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn, error")
	format := fs.String("log-format", "auto", "log `format`: json, console, or auto (console on a terminal)")
	if rc, done := parseSub(fs, args); done {
		return rc
	}
	if *data == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "storage-agent index: --data is required, and nothing else")
		return 2
	}
	log, err := cli.Logger(*level, *format, "storage-agent", stderr)
	if err != nil {
		fmt.Fprintln(stderr, "storage-agent index:", err)
		return 2
	}
	opts := dataset.OpenOptions{Strict: *strict, Index: *index, Logger: log, Workers: *workers, Progress: *every}
	if *every == 0 {
		opts.Progress = -1 // 0 on the command line: never
	}
	if *manifest != "" {
		if opts.Manifest, err = dataset.ReadManifest(*manifest); err != nil {
			fmt.Fprintln(stderr, "storage-agent index:", err)
			return 1
		}
	}
	d, err := s3src.OpenDataset(context.Background(), *data, s3src.Config{MaxObjects: *maxObjects}, opts)
	if err != nil {
		fmt.Fprintln(stderr, "storage-agent index:", err)
		return 1
	}
	defer d.Close()
	printIndexSummary(stdout, d)
	return 0
}

// printIndexSummary writes what indexing found and did.
func printIndexSummary(w io.Writer, d *dataset.Dataset) {
	st := d.Stats()
	var bytes uint64
	for i := range d.Len() {
		bytes += d.RawSize(i)
	}
	index := st.IndexFile
	if index == "" {
		index = "none"
	}
	fmt.Fprintf(w, "indexed %s: %d samples (%d missing), %d classes, %d bytes, fingerprint %s\n",
		dataset.DisplayName(d.Dir()), st.Samples, st.Missing, len(d.ClassNames()), bytes, d.Fingerprint())
	fmt.Fprintf(w, "hashed %d, reused %d from the index %s; %d headers read, %d unknown; took %s\n",
		st.Hashed, st.Reused, index, st.HeadersRead, st.HeadersUnknown, st.Took.Round(time.Millisecond))
	reasons := make([]string, 0, len(st.Skipped))
	for r := range st.Skipped {
		reasons = append(reasons, string(r))
	}
	slices.Sort(reasons)
	for _, r := range reasons {
		fmt.Fprintf(w, "skipped %d: %s\n", st.Skipped[dataset.SkipReason(r)], r)
	}
}
