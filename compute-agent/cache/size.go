package cache

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte count: a plain number of bytes, or one with a
// binary unit (KiB, MiB, GiB, TiB) or a decimal one (kB, MB, GB, TB, also
// K, M, G, T as binary).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("cache: size %q: want bytes, e.g. 512MiB or 2GB", s)
	}
	return int64(f * float64(mult)), nil
}

// Size is a byte count that parses like ParseSize, as a flag
// (flag.Value) and from YAML or JSON text.
type Size int64

// String prints the count in bytes.
func (s Size) String() string { return strconv.FormatInt(int64(s), 10) }

// Set parses v (flag.Value).
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// UnmarshalText parses b (encoding.TextUnmarshaler).
func (s *Size) UnmarshalText(b []byte) error { return s.Set(string(b)) }
