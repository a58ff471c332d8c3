package cache

import (
	"fmt"
	"strconv"

	"github.com/sophon-dl/sophon/internal/bytesize"
)

// ParseSize parses a byte count with bytesize.Parse, the one parser of
// every size flag: a plain number of bytes, or one with a unit
// (bytesize.Units: K, M, G, T and KiB... binary, kB, MB... decimal).
func ParseSize(s string) (int64, error) {
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("cache: size: %w", err)
	}
	return n, nil
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
