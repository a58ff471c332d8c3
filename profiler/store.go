package profiler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
)

// A profile file is the Profile as JSON (the struct's field tags), compressed
// as one zstd stream. Its "version" field is ProfileVersion; a reader refuses
// any other before looking at the rest, so a later format can change
// everything but that field. Save writes to a temporary file in the same
// directory and renames it over the target, so a reader sees the old file or
// the new one, never a part.

// Profile file errors. Every error Load and DecodeProfile return wraps one
// of these (or an I/O error from the file system).
var (
	// ErrProfileVersion is a file of another format version.
	ErrProfileVersion = errors.New("profiler: unsupported profile version")
	// ErrProfileMismatch is a profile of another dataset or pipeline.
	ErrProfileMismatch = errors.New("profiler: profile does not match")
	// ErrProfileCorrupt is a file that does not decompress or parse.
	ErrProfileCorrupt = errors.New("profiler: corrupt profile file")
	// ErrProfileInvalid is a profile whose contents are inconsistent (see
	// [Profile.Validate]).
	ErrProfileInvalid = errors.New("profiler: invalid profile")
)

// MismatchError says which key of a profile differs from the one expected.
// It matches ErrProfileMismatch under errors.Is.
type MismatchError struct {
	// Field is "fingerprint" or "pipeline".
	Field     string
	Got, Want string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("profiler: profile %s is %q, want %q", e.Field, e.Got, e.Want)
}

// Is reports whether target is ErrProfileMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrProfileMismatch }

// DefaultMaxProfileBytes bounds the decompressed JSON Load accepts: about
// three million samples of a five-op pipeline.
const DefaultMaxProfileBytes = 1 << 30

// Save writes p to path as a version ProfileVersion file (p's own Version
// field is ignored), atomically: a temporary file in path's directory,
// synced, then renamed over path. p must pass [Profile.Validate].
func Save(path string, p *Profile) (err error) {
	if err := p.Validate(); err != nil {
		return err
	}
	out := *p
	out.Version = ProfileVersion
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("profiler: save %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	zw, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return fmt.Errorf("profiler: save %s: %w", path, err)
	}
	if err := json.NewEncoder(zw).Encode(&out); err != nil {
		zw.Close()
		return fmt.Errorf("profiler: save %s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("profiler: save %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("profiler: save %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("profiler: save %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("profiler: save %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("profiler: save %s: %w", path, err)
	}
	return nil
}

// Load reads the profile file at path and checks that it is for the
// dataset with this fingerprint and the pipeline with this ID
// (ops.Pipeline.ID); an empty fingerprint or pipelineID skips that check
// (for tools that only read a profile). A file of another version is
// ErrProfileVersion, of another dataset or pipeline a *MismatchError
// (ErrProfileMismatch); one that does not parse is ErrProfileCorrupt and
// one that parses but fails Validate ErrProfileInvalid.
func Load(path, fingerprint, pipelineID string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("profiler: load: %w", err)
	}
	defer f.Close()
	// The compressed file cannot usefully exceed the decompressed bound.
	b, err := io.ReadAll(io.LimitReader(f, DefaultMaxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("profiler: load %s: %w", path, err)
	}
	if len(b) > DefaultMaxProfileBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrProfileCorrupt, path, DefaultMaxProfileBytes)
	}
	p, err := DecodeProfile(b, DefaultMaxProfileBytes)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if fingerprint != "" && p.Fingerprint != fingerprint {
		return nil, &MismatchError{Field: "fingerprint", Got: p.Fingerprint, Want: fingerprint}
	}
	if pipelineID != "" && p.Pipeline != pipelineID {
		return nil, &MismatchError{Field: "pipeline", Got: p.Pipeline, Want: pipelineID}
	}
	return p, nil
}

// DecodeProfile decodes a profile file's bytes, refusing more than
// maxBytes of decompressed JSON (zero or less means
// DefaultMaxProfileBytes), and validates the result. It does not check
// the fingerprint or pipeline; Load does.
func DecodeProfile(b []byte, maxBytes int64) (*Profile, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxProfileBytes
	}
	zr, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(uint64(maxBytes)),
		zstd.WithDecoderMaxWindow(uint64(max(min(maxBytes, zstd.MaxWindowSize), zstd.MinWindowSize))))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProfileCorrupt, err)
	}
	defer zr.Close()
	js, err := zr.DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: zstd: %v", ErrProfileCorrupt, err)
	}
	if int64(len(js)) > maxBytes {
		return nil, fmt.Errorf("%w: over %d bytes decompressed", ErrProfileCorrupt, maxBytes)
	}
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProfileCorrupt, err)
	}
	if head.Version == nil {
		return nil, fmt.Errorf("%w: no version", ErrProfileVersion)
	}
	if *head.Version != ProfileVersion {
		return nil, fmt.Errorf("%w: %d, want %d", ErrProfileVersion, *head.Version, ProfileVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProfileCorrupt, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the profile", ErrProfileCorrupt)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks that the profile is consistent: every sample has n+1
// Bytes (Bytes[0] equal to Raw) and n OpNS for the n Ops, Compressed,
// CompressNS and DecompressNS are empty or have n+1 entries, Compressed
// never exceeds Bytes, nothing is negative, and ids strictly increase. A
// sample's cut fields are all zero, or CutBytes is positive, the pipeline
// has at least the two ops the cut replaces, and CutNS and CutFinishNS are
// not negative. Resources, when set, holds no negative or non-finite
// number. Errors wrap ErrProfileInvalid.
func (p *Profile) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: nil profile", ErrProfileInvalid)
	}
	n := len(p.Ops)
	for j, name := range p.Ops {
		if name == "" {
			return fmt.Errorf("%w: op %d has no name", ErrProfileInvalid, j)
		}
	}
	if err := p.Resources.validate(); err != nil {
		return fmt.Errorf("%w: resources: %v", ErrProfileInvalid, err)
	}
	if p.CropSplit < 0 || p.CropSplit > n {
		return fmt.Errorf("%w: crop split %d outside [0, %d]", ErrProfileInvalid, p.CropSplit, n)
	}
	for i := range p.Samples {
		s := &p.Samples[i]
		if i > 0 && s.ID <= p.Samples[i-1].ID {
			return fmt.Errorf("%w: sample %d follows %d: ids must strictly increase", ErrProfileInvalid, s.ID, p.Samples[i-1].ID)
		}
		if err := s.validate(n); err != nil {
			return fmt.Errorf("%w: sample %d: %v", ErrProfileInvalid, s.ID, err)
		}
	}
	return nil
}

func (s *SampleProfile) validate(n int) error {
	if s.Raw < 0 {
		return fmt.Errorf("raw size %d", s.Raw)
	}
	if len(s.Bytes) != n+1 {
		return fmt.Errorf("%d bytes entries, want %d", len(s.Bytes), n+1)
	}
	if len(s.OpNS) != n {
		return fmt.Errorf("%d op_ns entries, want %d", len(s.OpNS), n)
	}
	if s.Bytes[0] != s.Raw {
		return fmt.Errorf("bytes[0] %d differs from raw %d", s.Bytes[0], s.Raw)
	}
	fields := []struct {
		name     string
		v        []int64
		optional bool
	}{
		{"bytes", s.Bytes, false},
		{"op_ns", s.OpNS, false},
		{"compressed", s.Compressed, true},
		{"compress_ns", s.CompressNS, true},
		{"decompress_ns", s.DecompressNS, true},
	}
	for _, f := range fields {
		if f.optional && len(f.v) != 0 && len(f.v) != n+1 {
			return fmt.Errorf("%d %s entries, want 0 or %d", len(f.v), f.name, n+1)
		}
		for k, x := range f.v {
			if x < 0 {
				return fmt.Errorf("%s[%d] is %d", f.name, k, x)
			}
		}
	}
	for k, c := range s.Compressed {
		if c > s.Bytes[k] {
			return fmt.Errorf("compressed[%d] %d exceeds bytes %d", k, c, s.Bytes[k])
		}
	}
	switch {
	case s.CutBytes < 0 || s.CutNS < 0 || s.CutFinishNS < 0:
		return fmt.Errorf("cut bytes %d, cut ns %d, cut finish ns %d: negative", s.CutBytes, s.CutNS, s.CutFinishNS)
	case s.CutBytes == 0 && (s.CutNS != 0 || s.CutFinishNS != 0):
		return fmt.Errorf("cut ns %d and cut finish ns %d without cut bytes", s.CutNS, s.CutFinishNS)
	case s.CutBytes > 0 && n < 2:
		return fmt.Errorf("cut bytes %d in a pipeline of %d ops: the cut replaces two", s.CutBytes, n)
	}
	return nil
}

func (m *MeasuredResources) validate() error {
	if m == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		x    float64
	}{
		{"link_bytes_per_sec", m.LinkBytesPerSec},
		{"storage_speed", m.StorageSpeed},
		{"storage_cores", m.StorageCores},
		{"compute_cores", m.ComputeCores},
		{"gpu_samples_per_sec", m.GPUSamplesPerSec},
		{"epochs", m.Epochs},
	} {
		if !(f.x >= 0) || math.IsInf(f.x, 1) {
			return fmt.Errorf("%s is %v", f.name, f.x)
		}
	}
	return nil
}

// PrefixNS is the CPU time of ops[0:k] on this sample: what running split
// k's storage side cost on the node that measured it.
func (s *SampleProfile) PrefixNS(k int) int64 {
	var t int64
	for _, d := range s.OpNS[:k] {
		t += d
	}
	return t
}
