package shape

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sophon-dl/sophon/internal/cli"
)

// ErrRate: a rate that is not a positive tc-style rate.
var ErrRate = errors.New("shape: bad rate")

// Rate is a link rate in tc's syntax, parsed once (at the flag, with
// ParseRate or Set) and carried typed from there: to tc, to the in-process
// shaper and into the results. The zero Rate is no rate: unshaped where a
// link may be, refused where one is needed.
//
// A Rate implements flag.Value. String gives the rate as it was given,
// white space trimmed ("100mbit", "1Gbit"): the text tc is handed, and the
// one that names a cell's result folder ("100mbit-cpu0.5").
type Rate struct {
	text string
	bits float64
}

// ParseRate reads a tc rate ("500mbit", "1gbit", "12.5mbps", "64kibit").
// As in tc(8), *bit units are bits and *bps units bytes per second, k/m/g/t
// are powers of 1000 and ki/mi/gi/ti powers of 1024, and a bare number is
// bits per second. A rate that is not positive and finite is ErrRate.
func ParseRate(s string) (Rate, error) {
	text := strings.TrimSpace(s)
	bits, err := cli.ParseBitRate(text)
	if err != nil || bits <= 0 {
		return Rate{}, fmt.Errorf("%w: %q: want a positive tc rate such as 500mbit, 1gbit or 12.5mbps", ErrRate, s)
	}
	return Rate{text: text, bits: bits}, nil
}

// MustParseRate is ParseRate for constants and tests: it panics on a bad
// rate.
func MustParseRate(s string) Rate {
	r, err := ParseRate(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Bits is the rate in bits per second; 0 for the zero Rate.
func (r Rate) Bits() float64 { return r.bits }

// BytesPerSec is the rate in bytes per second; 0 for the zero Rate.
func (r Rate) BytesPerSec() float64 { return r.bits / 8 }

// IsZero reports whether r is the zero Rate (no rate).
func (r Rate) IsZero() bool { return r.bits == 0 }

// String is the rate as given ("500mbit"); "" for the zero Rate.
func (r Rate) String() string { return r.text }

// Set parses s into r (flag.Value).
func (r *Rate) Set(s string) error {
	v, err := ParseRate(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Rates is a comma-separated list of rates ("100mbit,500mbit"), a
// flag.Value: Set replaces the whole list, so a flag's default list is
// overridden, not appended to.
type Rates []Rate

// ParseRates reads a comma-separated list of rates; empty items are
// skipped, and an empty list is ErrRate.
func ParseRates(s string) (Rates, error) {
	var out Rates
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		r, err := ParseRate(f)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %q: no rate in the list", ErrRate, s)
	}
	return out, nil
}

// String joins the rates with commas, as given.
func (rs Rates) String() string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

// Set parses s into rs, replacing what it held (flag.Value).
func (rs *Rates) Set(s string) error {
	v, err := ParseRates(s)
	if err != nil {
		return err
	}
	*rs = v
	return nil
}
