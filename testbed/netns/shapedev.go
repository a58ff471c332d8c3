package netns

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sophon-dl/sophon/testbed/shape"
)

// This file shapes a real interface in the caller's namespace with the
// same tbf qdisc that Setup puts on its veth ends, for runs across two
// real nodes (`testbed shape`).

// validDev is a Linux interface name: 1 to 15 bytes, no '/' or white
// space; a leading '-' is refused so tc cannot read it as an option.
var validDev = regexp.MustCompile(`^[^-/\s][^/\s]{0,14}$`)

func checkDev(dev string) error {
	if !validDev.MatchString(dev) || dev == "." || dev == ".." {
		return fmt.Errorf("%w: device %q: want an interface name of 1 to 15 bytes", ErrConfig, dev)
	}
	return nil
}

// tbfArgs are the arguments of `tc qdisc add|replace` that give dev a root
// tbf qdisc: rate as given (tc's syntax), burst in bytes, latency rounded
// down to microseconds.
func tbfArgs(dev string, rate shape.Rate, burst int, latency time.Duration) []string {
	return []string{"dev", dev, "root", "tbf",
		"rate", rate.String(), "burst", strconv.Itoa(burst), "latency", fmt.Sprintf("%dus", latency.Microseconds())}
}

// ShapeDev gives interface dev of the caller's network namespace a root
// tbf qdisc (`tc qdisc replace`), replacing whatever root qdisc it has:
// what dev sends then leaves at rate at most; the zero Rate is ErrConfig.
// A burst of zero means shape.DefaultBurst(rate); a latency of zero means
// DefaultLatency. Only dev's egress is shaped: to shape both directions of
// a link, shape both of its ends. It needs root.
func ShapeDev(ctx context.Context, dev string, rate shape.Rate, burst int, latency time.Duration) error {
	if err := checkDev(dev); err != nil {
		return err
	}
	if rate.IsZero() {
		return fmt.Errorf("%w: no rate to shape %s at", ErrConfig, dev)
	}
	if burst < 0 || latency < 0 {
		return fmt.Errorf("%w: negative burst or latency", ErrConfig)
	}
	if burst == 0 {
		burst = shape.DefaultBurst(rate.Bits())
	}
	if latency == 0 {
		latency = DefaultLatency
	}
	return run(ctx, append([]string{"tc", "qdisc", "replace"}, tbfArgs(dev, rate, burst, latency)...)...)
}

// ClearDev deletes the root qdisc of interface dev (`tc qdisc del dev DEV
// root`), which returns it to the kernel's default. NB: that is whatever
// root qdisc dev has, tbf or not. A device that has only the default is
// left alone, without error. It needs root.
func ClearDev(ctx context.Context, dev string) error {
	if err := checkDev(dev); err != nil {
		return err
	}
	out, err := output(ctx, "tc", "qdisc", "show", "dev", dev)
	if err != nil || !hasRootQdisc(out) {
		return err
	}
	err = run(ctx, "tc", "qdisc", "del", "dev", dev, "root")
	if err != nil {
		// Someone else may have deleted it meanwhile.
		if out, serr := output(ctx, "tc", "qdisc", "show", "dev", dev); serr == nil && !hasRootQdisc(out) {
			return nil
		}
	}
	return err
}

// ShowDev returns interface dev's qdiscs with their statistics (`tc -s
// qdisc show dev DEV`): the rate, burst and latency of a tbf, and the
// bytes sent, dropped and held back (overlimits).
func ShowDev(ctx context.Context, dev string) (string, error) {
	if err := checkDev(dev); err != nil {
		return "", err
	}
	return output(ctx, "tc", "-s", "qdisc", "show", "dev", dev)
}

// hasRootQdisc reports whether the text of `tc qdisc show dev DEV` holds a
// root qdisc that was set, rather than the kernel's default, which has
// handle 0: ("qdisc noqueue 0: root refcnt 2").
func hasRootQdisc(out string) bool {
	for _, line := range strings.Split(out, "\n") {
		// "qdisc tbf 8001: root refcnt 2 rate 500Mbit ..."
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "qdisc" && f[3] == "root" && f[2] != "0:" {
			return true
		}
	}
	return false
}
