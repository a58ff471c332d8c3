// Package cli holds what the two agents' command lines share: flags that
// may also come from a YAML file, list flags, logger set-up and the
// start-up sequence.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"
)

// List is a comma-separated flag, or in YAML a list or a comma-separated
// string.
type List []string

func (l *List) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *List) Set(s string) error {
	*l = nil
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			*l = append(*l, x)
		}
	}
	return nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (l *List) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return l.Set(n.Value)
	}
	var v []string
	if err := n.Decode(&v); err != nil {
		return err
	}
	*l = v
	return nil
}

// Parse fills settings from the command line and from the YAML file that
// its config field names, in that order of precedence: flags given on the
// command line override the file, which overrides defaults. flags binds a
// flag set to the settings it is given; config returns the settings' config
// file field. Unknown keys in the file are errors.
func Parse[T any](args []string, defaults func() T, flags func(*T) *flag.FlagSet, config func(*T) string) (T, error) {
	s := defaults()
	if err := flags(&s).Parse(args); err != nil {
		return s, err
	}
	path := config(&s)
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	f := defaults()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return s, fmt.Errorf("config %s: %w", path, err)
	}
	// Parse again over the file's values, so the flags given win.
	if err := flags(&f).Parse(args); err != nil {
		return f, err
	}
	return f, nil
}

// Logger returns a zerolog logger writing to out at level ("debug",
// "info", "warn", "error") in format: "json", "console", or "auto"
// (console on a terminal, JSON otherwise).
func Logger(level, format, component string, out *os.File) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("bad --log-level %q", level)
	}
	var w io.Writer = out
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: out, TimeFormat: time.RFC3339}
	case "auto":
		if fi, err := out.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			w = zerolog.ConsoleWriter{Out: out, TimeFormat: time.RFC3339}
		}
	default:
		return zerolog.Nop(), fmt.Errorf("bad --log-format %q", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("component", component).Logger(), nil
}

// SetMemoryLimit sets the Go runtime's soft memory limit to bytes unless
// the GOMEMLIMIT environment variable is set, which wins, or bytes is not
// positive. Near the limit the collector runs more often whatever the GC
// percent, so a large GC percent costs no memory under load.
func SetMemoryLimit(bytes int64) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && bytes > 0 {
		debug.SetMemoryLimit(bytes)
	}
}

// SetGCPercent sets the GC target unless the GOGC environment variable
// is set, which wins.
func SetGCPercent(percent int) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(percent)
	}
}
