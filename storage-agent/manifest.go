package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/sophon-dl/sophon/internal/cli"
	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/storage-agent/dataset"
	"github.com/sophon-dl/sophon/storage-agent/dataset/s3src"
)

const manifestUsage = `Usage: storage-agent manifest --data DIR --out FILE [--index FILE] [--strict]

Writes the manifest of the dataset in DIR: its whole catalog (every
sample's path, size, label and SHA-256, and the class names) in one file.
Storage agents that each have only part of the dataset's files serve it
together when they all run with --manifest FILE: the catalog, the sample
ids and the fingerprint come from the manifest, and each agent serves the
samples whose files it has (checked against the manifest) and announces
the shards it lacks. Run it on a full copy; "storage-agent place" then
lists the files each agent should have.

Flags:
`

// manifestCmd is "storage-agent manifest".
func manifestCmd(args []string, stdout, stderr io.Writer) int {
	fs := subcommand("storage-agent manifest", manifestUsage, stderr)
	data := fs.String("data", "", "the whole dataset's `directory` or s3://BUCKET/PREFIX (ImageFolder or *.tar shards); required")
	out := fs.String("out", "", "manifest `file` to write; required")
	index := fs.String("index", "", "content-hash index `file`, as the agent's --index")
	strict := fs.Bool("strict", false, "refuse the dataset on any bad entry, as the agent's --strict")
	maxObjects := fs.Int("s3-max-objects", s3src.DefaultMaxObjects, "with an s3:// --data, the most `objects` listed, as the agent's --s3-max-objects")
	if rc, done := parseSub(fs, args); done {
		return rc
	}
	if *data == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "storage-agent manifest: --data and --out are required, and nothing else")
		return 2
	}
	d, err := s3src.OpenDataset(context.Background(), *data, s3src.Config{MaxObjects: *maxObjects}, dataset.OpenOptions{Strict: *strict, Index: *index})
	if err != nil {
		fmt.Fprintln(stderr, "storage-agent manifest:", err)
		return 1
	}
	defer d.Close()
	b := d.Manifest().Encode()
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(stderr, "storage-agent manifest:", err)
		return 1
	}
	skipped := 0
	for _, c := range d.Stats().Skipped {
		skipped += c
	}
	fmt.Fprintf(stdout, "wrote %s: %d samples, %d classes, %d bytes, fingerprint %s (%d entries skipped)\n",
		*out, d.Len(), len(d.ClassNames()), len(b), d.Fingerprint(), skipped)
	return 0
}

const placeUsage = `Usage: storage-agent place --manifest FILE --members NAMES [--replicas R] [--shard-size N] [--member NAME]

Lists the files each storage agent should have so that the manifest's
shards are held as rendezvous hashing places them over the agents NAMES
(their gossip names, --name) with R copies of each shard: the tar files of
its shards, or for a folder of images the image files of its id ranges,
one path per line relative to the data directory. Without --member, each
line is "NAME<TAB>PATH"; with it, only that agent's paths, ready for
"rsync --files-from". Start every agent with the same --manifest,
--replicas and --shard-size.

Flags:
`

// placeCmd is "storage-agent place".
func placeCmd(args []string, stdout, stderr io.Writer) int {
	fs := subcommand("storage-agent place", placeUsage, stderr)
	man := fs.String("manifest", "", "manifest `file` (storage-agent manifest); required")
	var members cli.List
	fs.Var(&members, "members", "the storage agents' gossip `names`, comma-separated; required")
	replicas := fs.Int("replicas", placement.DefaultReplicas, "`copies` of each shard, as the agents' --replicas")
	shardSize := fs.Uint64("shard-size", placement.DefaultShardSize, "`samples` per shard of a folder of images, as the agents' --shard-size")
	only := fs.String("member", "", "print only this agent's paths")
	if rc, done := parseSub(fs, args); done {
		return rc
	}
	if *man == "" || len(members) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "storage-agent place: --manifest and --members are required, and nothing else")
		return 2
	}
	if *replicas < 0 || *replicas > placement.MaxReplicas {
		fmt.Fprintf(stderr, "storage-agent place: --replicas %d outside [0, %d]\n", *replicas, placement.MaxReplicas)
		return 2
	}
	if *only != "" && !slices.Contains(members, *only) {
		fmt.Fprintf(stderr, "storage-agent place: --member %s is not one of --members\n", *only)
		return 2
	}
	m, err := dataset.ReadManifest(*man)
	if err != nil {
		fmt.Fprintln(stderr, "storage-agent place:", err)
		return 1
	}
	files, err := m.Place(members, *replicas, *shardSize)
	if err != nil {
		fmt.Fprintln(stderr, "storage-agent place:", err)
		return 1
	}
	for _, n := range slices.Sorted(maps.Keys(files)) {
		if *only != "" && n != *only {
			continue
		}
		for _, f := range files[n] {
			if strings.ContainsAny(f, "\n\r") {
				fmt.Fprintf(stderr, "storage-agent place: %s: a path with a line break cannot be listed one per line\n", dataset.DisplayName(f))
				return 1
			}
			if *only != "" {
				fmt.Fprintln(stdout, f)
			} else {
				fmt.Fprintf(stdout, "%s\t%s\n", n, f)
			}
		}
	}
	return 0
}

// subcommand is a subcommand's flag set, printing usage and its flags on
// stderr for --help and errors.
func subcommand(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	return fs
}

// parseSub parses a subcommand's args; done means return rc: 0 after
// --help, 2 on a bad flag (already reported).
func parseSub(fs *flag.FlagSet, args []string) (rc int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	return 0, false
}
