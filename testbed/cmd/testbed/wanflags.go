package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// wanFlags are the WAN options that `testbed run` and `testbed shape`
// share: a round trip, its jitter and a loss fraction.
type wanFlags struct {
	rtt, jitter *time.Duration
	loss        lossFlag
}

// addWANFlags defines --rtt, --jitter and --loss on fs; how says how they
// are applied (the usage's last sentence for --rtt).
func addWANFlags(fs *flag.FlagSet, how string) *wanFlags {
	w := &wanFlags{
		rtt:    fs.Duration("rtt", 0, "round trip `time` the link adds, half each way (e.g. 40ms); "+how),
		jitter: fs.Duration("jitter", 0, "spread each packet's one-way delay uniformly over RTT/2 ± this `time` (e.g. 5ms)"),
	}
	fs.Var(&w.loss, "loss", "`fraction` of packets dropped in each direction, as a percentage (0.1%) or a fraction (0.001); a round trip loses about twice that")
	return w
}

// set reports whether any of the three is set.
func (w *wanFlags) set() bool { return *w.rtt != 0 || *w.jitter != 0 || w.loss != 0 }

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
