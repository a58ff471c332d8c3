// Package oplimits provides the limits both agents apply when they run ops
// on dataset samples, as one settings type with one set of defaults and
// flags: the storage agent on what it serves, the compute agent on what it
// finishes (raw samples under the nooff plan, cuts, stage 1's
// measurement). A file one agent refuses, the other refuses too.
package oplimits

import (
	"errors"
	"flag"
	"time"

	"github.com/sophon-dl/sophon/ops"
)

// DefaultOpTimeout is the deadline of one sample's ops.
const DefaultOpTimeout = 10 * time.Second

// Settings are the flags --max-pixels, --max-scans, --decode-memory,
// --max-output-bytes and --op-timeout; the yaml tags are the flags' names
// and the config files' keys. Zero fields mean the defaults ([Default]).
type Settings struct {
	// MaxPixels is ops.Limits.MaxPixels. Zero means
	// ops.DefaultServerMaxPixels.
	MaxPixels int64 `yaml:"max-pixels"`
	// MaxScans is ops.Limits.MaxScans. Zero means ops.DefaultMaxScans.
	MaxScans int `yaml:"max-scans"`
	// DecodeMemory is ops.Limits.MaxMemory. Zero means
	// ops.DefaultMaxMemory.
	DecodeMemory int64 `yaml:"decode-memory"`
	// MaxOutputBytes is ops.Limits.MaxOutputBytes. Zero means
	// ops.DefaultMaxOutputBytes.
	MaxOutputBytes int64 `yaml:"max-output-bytes"`
	// OpTimeout is the deadline of one sample's ops (ops.Limits.Deadline,
	// set when the sample's ops start), checked between ops and inside the
	// JPEG decoder; a sample past it fails with ops.ErrDeadline. Zero
	// means DefaultOpTimeout.
	OpTimeout time.Duration `yaml:"op-timeout"`
}

// Default returns the settings with every default spelled out.
func Default() Settings {
	return Settings{
		MaxPixels:      ops.DefaultServerMaxPixels,
		MaxScans:       ops.DefaultMaxScans,
		DecodeMemory:   ops.DefaultMaxMemory,
		MaxOutputBytes: ops.DefaultMaxOutputBytes,
		OpTimeout:      DefaultOpTimeout,
	}
}

// ErrInvalid marks a negative limit.
var ErrInvalid = errors.New("oplimits: negative limit")

// WithDefaults checks s and returns it with its zero fields filled in.
func (s Settings) WithDefaults() (Settings, error) {
	if s.MaxPixels < 0 || s.MaxScans < 0 || s.DecodeMemory < 0 || s.MaxOutputBytes < 0 || s.OpTimeout < 0 {
		return s, ErrInvalid
	}
	d := Default()
	if s.MaxPixels == 0 {
		s.MaxPixels = d.MaxPixels
	}
	if s.MaxScans == 0 {
		s.MaxScans = d.MaxScans
	}
	if s.DecodeMemory == 0 {
		s.DecodeMemory = d.DecodeMemory
	}
	if s.MaxOutputBytes == 0 {
		s.MaxOutputBytes = d.MaxOutputBytes
	}
	if s.OpTimeout == 0 {
		s.OpTimeout = d.OpTimeout
	}
	return s, nil
}

// Limits are the ops limits without a deadline (a zero field: no limit).
func (s Settings) Limits() ops.Limits {
	return ops.Limits{MaxPixels: s.MaxPixels, MaxScans: s.MaxScans, MaxMemory: s.DecodeMemory, MaxOutputBytes: s.MaxOutputBytes}
}

// At is the limits of one sample whose ops start at now: Limits with the
// deadline now + OpTimeout (none when OpTimeout is zero).
func (s Settings) At(now time.Time) ops.Limits {
	l := s.Limits()
	if s.OpTimeout > 0 {
		l.Deadline = now.Add(s.OpTimeout)
	}
	return l
}

// Register binds the five flags to s, with s's values as the defaults.
func (s *Settings) Register(fs *flag.FlagSet) {
	fs.DurationVar(&s.OpTimeout, "op-timeout", s.OpTimeout, "deadline of one sample's ops, checked between ops and inside the JPEG decoder (DEADLINE past it)")
	fs.Int64Var(&s.MaxPixels, "max-pixels", s.MaxPixels, "largest decoded image in `pixels`; clients can lower it, never raise it")
	fs.IntVar(&s.MaxScans, "max-scans", s.MaxScans, "most `scans` a progressive JPEG may have (djpeg -maxscans)")
	fs.Int64Var(&s.DecodeMemory, "decode-memory", s.DecodeMemory, "`bytes` the JPEG decoder may allocate for one image (progressive coefficient buffers)")
	fs.Int64Var(&s.MaxOutputBytes, "max-output-bytes", s.MaxOutputBytes, "largest output of any op in `bytes`, checked before it allocates")
}
