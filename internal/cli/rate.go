package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rateUnits are tc's rate units in bits per second, longest suffix first
// so "kbps" is not read as "bps". As in tc(8), *bit units are bits and
// *bps units bytes per second, k/m/g/t are powers of 1000 and ki/mi/gi/ti
// powers of 1024, and a bare number is bits per second.
var rateUnits = []struct {
	suffix string
	bits   float64
}{
	{"kibit", 1024}, {"mibit", 1 << 20}, {"gibit", 1 << 30}, {"tibit", 1 << 40},
	{"kibps", 8 * 1024}, {"mibps", 8 << 20}, {"gibps", 8 << 30}, {"tibps", 8 << 40},
	{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12},
	{"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}, {"tbps", 8e12},
	{"bit", 1}, {"bps", 8},
}

// ParseBitRate reads a rate in tc's syntax ("500mbit", "10gbit",
// "12.5mbps", "64kibit") as bits per second: a number, not negative and
// finite, and a unit. The storage agent's --egress and the testbed's link
// rates both parse with it; each says which rates it accepts.
func ParseBitRate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range rateUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.bits
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || math.IsInf(v*mult, 0) {
		return 0, fmt.Errorf("rate %q: want a number and a tc unit, e.g. 500mbit, 10gbit or 12.5mbps", s)
	}
	return v * mult, nil
}
