package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// wanFlags are the WAN options that `testbed run` and `testbed shape`
// share: round trips, their jitter and a loss fraction.
type wanFlags struct {
	rtt    rttList
	jitter *time.Duration
	loss   lossFlag
}

// addWANFlags defines --rtt, --jitter and --loss on fs; how says how they
// are applied (the usage's last sentence for --rtt). With grid, --rtt
// takes a list, a dimension of the grid; without it, one time.
func addWANFlags(fs *flag.FlagSet, how string, grid bool) *wanFlags {
	w := &wanFlags{jitter: fs.Duration("jitter", 0, "spread each packet's one-way delay uniformly over RTT/2 ± this `time` (e.g. 5ms)")}
	usage := "round trip `time` the link adds, half each way (e.g. 40ms); " + how
	if grid {
		usage = "round trip `times` the link adds, half each way, comma-separated (e.g. 0,20ms,80ms): a dimension of the grid like --rate, each cell named for its RTT; " + how
	}
	fs.Var(&w.rtt, "rtt", usage)
	fs.Var(&w.loss, "loss", "`fraction` of packets dropped in each direction, as a percentage (0.1%) or a fraction (0.001); a round trip loses about twice that")
	return w
}

// set reports whether any of the three is set.
func (w *wanFlags) set() bool { return len(w.rtt) > 0 || *w.jitter != 0 || w.loss != 0 }

// one is the one round trip of a command that takes one (0 when none).
func (w *wanFlags) one() (time.Duration, error) {
	switch len(w.rtt) {
	case 0:
		return 0, nil
	case 1:
		return w.rtt[0], nil
	}
	return 0, fmt.Errorf("--rtt %s: want one round trip here", w.rtt.String())
}

// rttList is --rtt: round trips, comma-separated ("0,20ms,80ms"), each
// at least 0 and at most 10 s, none twice.
type rttList []time.Duration

func (l *rttList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, d := range *l {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (l *rttList) Set(s string) error {
	var out rttList
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		d, err := time.ParseDuration(f)
		if err != nil {
			return fmt.Errorf("round trip %q: want a time such as 20ms (or 0)", f)
		}
		if d < 0 || d > 10*time.Second {
			return fmt.Errorf("round trip %v: want 0 to 10s", d)
		}
		if slices.Contains(out, d) {
			return fmt.Errorf("round trip %v given twice", d)
		}
		out = append(out, d)
	}
	*l = out
	return nil
}

// lossFlag is a loss fraction, given as "0.1%" or "0.001".
type lossFlag float64

func (l *lossFlag) String() string {
	if l == nil || *l == 0 {
		return "0"
	}
	return strconv.FormatFloat(100*float64(*l), 'g', 4, 64) + "%"
}

func (l *lossFlag) Set(s string) error {
	v, err := parseLoss(s)
	if err != nil {
		return err
	}
	*l = lossFlag(v)
	return nil
}

// parseLoss reads a loss fraction: "0.1%" is 0.001, as is "0.001". It must
// be in [0, 1).
func parseLoss(s string) (float64, error) {
	num, pct := strings.CutSuffix(strings.TrimSpace(s), "%")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("loss %q: want a percentage (0.1%%) or a fraction (0.001)", s)
	}
	if pct {
		v /= 100
	}
	if !(v >= 0 && v < 1) {
		return 0, fmt.Errorf("loss %q: want at least 0 and under 100%%", s)
	}
	return v, nil
}
