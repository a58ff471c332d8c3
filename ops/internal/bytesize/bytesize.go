// Package bytesize writes byte counts as a person reads them, for the op
// library's error messages about limits (package ops and its JPEG codec
// share the wording).
package bytesize

import "fmt"

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
