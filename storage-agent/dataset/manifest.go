package dataset

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sophon-dl/sophon/internal/placement"
	"github.com/sophon-dl/sophon/ops/jpeg"
)

// A manifest is a dataset's whole catalog written to a file, so that
// storage agents that each have only part of its files serve it together
// (sharded data): every agent numbers the samples, labels them and
// fingerprints the dataset from the manifest, serves the samples whose
// files it has (checked against the manifest's size and content hash) and
// announces the shards it lacks. "storage-agent manifest" writes one from a
// full copy of the dataset; "storage-agent place" says which files each
// agent should have. Its layout (integers are uvarints):
//
//	"sophon-manifest 2\n"
//	flags                        bit 0: WebDataset-style tar files
//	c                            classes
//	c x: len(name) name
//	n                            samples, in id order
//	n x: len(rel) rel size label hash[32] header[5]
//	SHA-256 of everything above [32]
//
// rel is the sample's path relative to the data directory, as the index
// file names it: for tar files "<file>.tar/<member>". header is the
// sample's jpeg.Summary in its binary form (all zero when unknown), so that
// every agent serves the same headers, those of files it lacks included.
// Version 1 is the same without header: its samples' headers are unknown,
// except those an agent reads from its own files.
const (
	manifestMagic   = "sophon-manifest 2\n"
	manifestMagicV1 = "sophon-manifest 1\n"
	// MaxManifestBytes bounds a manifest file read.
	MaxManifestBytes = 1 << 34
	// maxManifestName bounds a class name or a sample path in a manifest.
	maxManifestName = 4096
	// minManifestEntry is an entry's least size: four one-byte varints
	// (with a one-byte path) and the hash.
	minManifestEntry = 4 + 32
	manifestTars     = 1
)

// ErrManifest: a manifest file is damaged or not a manifest.
var ErrManifest = errors.New("dataset: bad manifest")

// Manifest is a dataset's catalog: its class names and, in id order, each
// sample's path, size, label and content hash.
type Manifest struct {
	// Tars is true for WebDataset-style tar files: each path is
	// "<file>.tar/<member>" and the tar file is the sample's shard.
	Tars    bool
	Classes []string
	Samples []ManifestSample
}

// ManifestSample is one sample of a [Manifest].
type ManifestSample struct {
	Rel   string // slash-separated, relative to the data directory, raw bytes
	Size  uint64
	Label uint32
	Hash  [32]byte
	// Header is the sample's JPEG header summary (unknown in a version 1
	// manifest).
	Header jpeg.Summary
	// NB: a manifest decoded from version 1 re-encodes as version 2.
}

// Manifest is d's catalog as a manifest.
func (d *Dataset) Manifest() *Manifest {
	m := &Manifest{Tars: d.tars, Classes: d.ClassNames(), Samples: make([]ManifestSample, len(d.samples))}
	for i, s := range d.samples {
		m.Samples[i] = ManifestSample{Rel: s.rel, Size: uint64(s.size), Label: s.label, Hash: s.hash, Header: s.hdr}
	}
	return m
}

// Encode is m's file form.
func (m *Manifest) Encode() []byte { return m.encode(manifestMagic, true) }

// encode is m's file form under magic, each sample's JPEG header included
// when headers is set (version 2; version 1 has none).
func (m *Manifest) encode(magic string, headers bool) []byte {
	b := []byte(magic)
	var flags uint64
	if m.Tars {
		flags |= manifestTars
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, uint64(len(m.Classes)))
	for _, c := range m.Classes {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Samples)))
	for _, s := range m.Samples {
		b = binary.AppendUvarint(b, uint64(len(s.Rel)))
		b = append(b, s.Rel...)
		b = binary.AppendUvarint(b, s.Size)
		b = binary.AppendUvarint(b, uint64(s.Label))
		b = append(b, s.Hash[:]...)
		if headers {
			b, _ = s.Header.AppendBinary(b)
		}
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// ReadManifest reads and checks the manifest file at path.
func ReadManifest(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrManifest, path, err)
	}
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrManifest, path, int64(MaxManifestBytes))
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// DecodeManifest parses and checks a manifest: the checksum, every count
// against the bytes left before allocating, paths that are local
// (slash-separated, no empty, "." or ".." element, no NUL) and unique,
// labels below the class count, sizes up to MaxSampleBytes, and for tar
// files paths "<file>.tar/<member>" whose files are contiguous, and header
// summaries that jpeg.ParseSummary accepts. It reads versions 2 and 1 (no
// headers: all unknown). Errors wrap ErrManifest and name the sample at
// fault.
func DecodeManifest(b []byte) (*Manifest, error) {
	v1 := len(b) >= len(manifestMagicV1) && string(b[:len(manifestMagicV1)]) == manifestMagicV1
	magic, minEntry := manifestMagic, minManifestEntry+jpeg.SummarySize
	if v1 {
		magic, minEntry = manifestMagicV1, minManifestEntry
	}
	body, err := checksummed(b, magic, ErrManifest, "a manifest file")
	if err != nil {
		return nil, err
	}
	f := &fields{r: body, bad: ErrManifest, v1: v1}
	m, err := decodeManifestHead(f)
	if err != nil {
		return nil, err
	}
	n, err := f.uv()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(f.r))/uint64(minEntry) {
		return nil, fmt.Errorf("%w: %d samples in %d bytes", ErrManifest, n, len(f.r))
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: no samples", ErrManifest)
	}
	m.Samples = make([]ManifestSample, 0, n)
	seen := make(map[string]bool, n)
	tars := map[string]bool{} // tar files whose samples are behind
	for i := range n {
		s, err := m.decodeSample(f, i, seen, tars)
		if err != nil {
			return nil, err
		}
		m.Samples = append(m.Samples, s)
	}
	if len(f.r) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrManifest, len(f.r))
	}
	return m, nil
}

// decodeManifestHead reads a manifest's flags and class names.
func decodeManifestHead(f *fields) (*Manifest, error) {
	flags, err := f.uv()
	if err != nil {
		return nil, err
	}
	if flags&^manifestTars != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrManifest, flags)
	}
	m := &Manifest{Tars: flags&manifestTars != 0}
	nc, err := f.uv()
	if err != nil {
		return nil, err
	}
	if nc > uint64(len(f.r)) {
		return nil, fmt.Errorf("%w: %d classes in %d bytes", ErrManifest, nc, len(f.r))
	}
	m.Classes = make([]string, 0, nc)
	for range nc {
		c, err := f.str(maxManifestName)
		if err != nil {
			return nil, err
		}
		m.Classes = append(m.Classes, c)
	}
	return m, nil
}

// decodeSample reads sample i of m (its classes and the samples before it
// decoded) and checks it: seen holds the paths so far, tars the tar files
// whose samples are behind.
func (m *Manifest) decodeSample(f *fields, i uint64, seen, tars map[string]bool) (s ManifestSample, err error) {
	if s.Rel, err = f.str(maxManifestName); err != nil {
		return s, fmt.Errorf("sample %d: %w", i, err)
	}
	if err := checkRel(s.Rel); err != nil {
		return s, fmt.Errorf("%w: sample %d (%s): %v", ErrManifest, i, DisplayName(s.Rel), err)
	}
	if seen[s.Rel] {
		return s, fmt.Errorf("%w: sample %d (%s) listed twice", ErrManifest, i, DisplayName(s.Rel))
	}
	seen[s.Rel] = true
	if m.Tars {
		if err := m.checkContiguous(i, s.Rel, tars); err != nil {
			return s, err
		}
	}
	if s.Size, err = f.uv(); err != nil {
		return s, fmt.Errorf("sample %d: %w", i, err)
	}
	if s.Size > MaxSampleBytes {
		return s, fmt.Errorf("%w: sample %d (%s): %d bytes, at most %d", ErrManifest, i, DisplayName(s.Rel), s.Size, MaxSampleBytes)
	}
	label, err := f.uv()
	if err != nil {
		return s, fmt.Errorf("sample %d: %w", i, err)
	}
	if label >= uint64(len(m.Classes)) {
		return s, fmt.Errorf("%w: sample %d (%s): label %d of %d classes", ErrManifest, i, DisplayName(s.Rel), label, len(m.Classes))
	}
	s.Label = uint32(label)
	if s.Hash, err = f.hash(); err != nil {
		return s, fmt.Errorf("sample %d: %w", i, err)
	}
	if !f.v1 {
		if s.Header, err = f.header(); err != nil {
			return s, fmt.Errorf("sample %d (%s): %w", i, DisplayName(s.Rel), err)
		}
	}
	return s, nil
}

// checkContiguous checks that tar sample i, at rel, is "<file>.tar/<member>"
// and that its tar file's samples are contiguous: tars holds the tar files
// whose samples are behind.
func (m *Manifest) checkContiguous(i uint64, rel string, tars map[string]bool) error {
	t, ok := tarOf(rel)
	if !ok {
		return fmt.Errorf("%w: sample %d (%s) is not <file>.tar/<member>", ErrManifest, i, DisplayName(rel))
	}
	if prev := len(m.Samples) - 1; prev >= 0 {
		if p, _ := tarOf(m.Samples[prev].Rel); p != t {
			tars[p] = true
			if tars[t] {
				return fmt.Errorf("%w: sample %d (%s): the samples of %s are not contiguous", ErrManifest, i, DisplayName(rel), DisplayName(t))
			}
		}
	}
	return nil
}

// checkRel checks a manifest path: slash-separated and local.
func checkRel(rel string) error {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.ContainsRune(rel, 0) {
		return errors.New("not a relative path")
	}
	for _, el := range strings.Split(rel, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("path element %q", el)
		}
	}
	return nil
}

// tarOf is the tar file of a tar sample's path "<file>.tar/<member>".
func tarOf(rel string) (string, bool) {
	i := strings.IndexByte(rel, '/')
	if i < 0 || !strings.HasSuffix(strings.ToLower(rel[:i]), ".tar") {
		return "", false
	}
	return rel[:i], true
}

// layoutOf is the shard layout of n samples (see [Dataset.Layout]): for tar
// files, one shard per file in the order of their samples, which rel gives;
// otherwise id ranges of shardSize.
func layoutOf(n int, tars bool, rel func(int) string, shardSize uint64) (placement.Layout, error) {
	if n == 0 || !tars {
		return placement.Uniform(uint64(n), shardSize)
	}
	var rs []placement.Range
	prev := ""
	for i := range n {
		t, _ := tarOf(rel(i))
		if i == 0 || t != prev {
			if len(rs) == placement.MaxShards {
				return placement.Layout{}, fmt.Errorf("%w: more than %d tar files with samples", placement.ErrTooManyShards, placement.MaxShards)
			}
			rs = append(rs, placement.Range{First: uint64(i), Name: DisplayName(t)})
			prev = t
		}
		rs[len(rs)-1].Count++
	}
	return placement.LayoutFromRanges(uint64(n), rs)
}

// Layout is the manifest's shard layout, the one every agent serving it
// announces (see [Dataset.Layout]).
func (m *Manifest) Layout(shardSize uint64) (placement.Layout, error) {
	return layoutOf(len(m.Samples), m.Tars, func(i int) string { return m.Samples[i].Rel }, shardSize)
}

// Place says which files each member should have for the manifest's
// shards to be held as rendezvous hashing places them over members with
// replicas copies (placement.Assign): per member, the tar files of its
// shards, or for a folder of images the image files of its id ranges, in
// id order. Copy them there and start each agent with --manifest and the
// same --replicas (and --shard-size); the agents' gossip names must be
// members' names.
func (m *Manifest) Place(members []string, replicas int, shardSize uint64) (map[string][]string, error) {
	l, err := m.Layout(shardSize)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for member, held := range placement.Assign(members, l.Len(), replicas) {
		files := []string{}
		for _, s := range held {
			r := l.Shard(s)
			if m.Tars {
				t, _ := tarOf(m.Samples[r.First].Rel)
				files = append(files, t)
				continue
			}
			for i := r.First; i < r.First+r.Count; i++ {
				files = append(files, m.Samples[i].Rel)
			}
		}
		out[member] = files
	}
	return out, nil
}
