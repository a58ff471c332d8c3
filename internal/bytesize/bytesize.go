// Package bytesize reads and writes byte counts as a person writes them:
// one parser for every flag that takes a size (compute-agent
// --cache-bytes, policy explain --cache-bytes, the testbed's budgets), so
// that "2G" means the same bytes everywhere, and the wording of the op
// library's error messages about limits.
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Units is the meaning of a size's unit, for a flag's --help: one line
// that every size flag quotes.
const Units = "K, M, G, T, KiB, MiB, GiB, TiB: binary (2^10, 2^20, ...); kB, MB, GB, TB: decimal (10^3, 10^6, ...); case ignored"

// ErrSyntax is wrapped by Parse's errors.
var ErrSyntax = errors.New("bytesize: bad byte count")

// MaxBytes bounds what Parse accepts (4 EiB).
const MaxBytes = 1 << 62

// units lists the suffixes longest first, so that "MiB" is not read as
// "B" after a number "1Mi". Matching ignores case.
var units = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// Parse reads a byte count: a number of bytes (4096, 1.5e9) with an
// optional unit (see Units): 2G, 2GiB and 2gib are 2^31 bytes, 2GB is
// 2*10^9, 512MiB is 2^29. Spaces around the number and the unit are
// allowed. A fraction of a byte is rounded down. Negative counts, NaN,
// infinities and counts above MaxBytes are errors.
func Parse(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range units {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v*mult > MaxBytes {
		return 0, fmt.Errorf("%w %q: want bytes with an optional unit, e.g. 512MiB, 2G (binary) or 2GB (decimal)", ErrSyntax, s)
	}
	return int64(math.Floor(v * mult)), nil
}

// Format writes n in KiB, MiB or GiB when it is a whole number of them,
// otherwise in decimal kB, MB or GB to one decimal, or in bytes.
func Format(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d bytes", n)
}
