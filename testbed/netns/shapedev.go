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

// Netem is what ShapeDevNetem makes a real interface do to what it sends,
// with tc netem: a delay, uniformly spread by a jitter, and a loss
// fraction. To give a link a round trip RTT, shape both of its ends with
// Delay RTT/2.
type Netem struct {
	// Delay is the one-way delay; Jitter spreads it uniformly over Delay ±
	// Jitter (netem's default distribution). NB: unlike the delay line,
	// netem reorders packets whose draws cross.
	Delay, Jitter time.Duration
	// Loss is the fraction of packets dropped: 0.001 is 0.1%.
	Loss float64
}

// ShapeDevNetem gives interface dev of the caller's namespace a root netem
// qdisc (handle 1:) with n's delay, jitter and loss, replacing its root
// qdisc, and, when rate is set, a tbf child at rate (burst and latency as
// ShapeDev's) so that the rate holds too. A kernel without netem gives an
// error wrapping ErrUnavailable that says so. It needs root.
func ShapeDevNetem(ctx context.Context, dev string, rate shape.Rate, burst int, latency time.Duration, n Netem) error {
	if err := checkDev(dev); err != nil {
		return err
	}
	if n.Delay < 0 || n.Jitter < 0 || !(n.Loss >= 0 && n.Loss < 1) || burst < 0 || latency < 0 {
		return fmt.Errorf("%w: netem delay %v, jitter %v, loss %v, burst %d, latency %v: want no negatives and loss under 1", ErrConfig, n.Delay, n.Jitter, n.Loss, burst, latency)
	}
	if n.Jitter > 0 && n.Delay == 0 {
		return fmt.Errorf("%w: netem jitter %v without a delay", ErrConfig, n.Jitter)
	}
	if burst == 0 && !rate.IsZero() {
		burst = shape.DefaultBurst(rate.Bits())
	}
	if latency == 0 {
		latency = DefaultLatency
	}
	err := run(ctx, netemArgs(dev, rate, n)...)
	if err != nil && strings.Contains(err.Error(), "qdisc kind is unknown") {
		return fmt.Errorf("%w: this kernel has no netem qdisc (sch_netem), which --rtt, --jitter and --loss need on a real interface (`testbed run --rtt` emulates them in user space instead): %w", ErrUnavailable, err)
	}
	if err != nil || rate.IsZero() {
		return err
	}
	return run(ctx, append([]string{"tc", "qdisc", "add"}, tbfChildArgs(dev, rate, burst, latency)...)...)
}

// netemArgs are the command that makes n dev's root qdisc. Its queue
// (limit, in packets) holds what rate sends over the delay, the jitter
// and 100 ms more, counting 1000 bytes a packet, and at least netem's
// default of 1000; without a rate, 10000.
func netemArgs(dev string, rate shape.Rate, n Netem) []string {
	args := []string{"tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "netem"}
	if n.Delay > 0 {
		args = append(args, "delay", fmt.Sprintf("%dus", n.Delay.Microseconds()))
		if n.Jitter > 0 {
			args = append(args, fmt.Sprintf("%dus", n.Jitter.Microseconds()))
		}
	}
	if n.Loss > 0 {
		args = append(args, "loss", strconv.FormatFloat(100*n.Loss, 'g', 6, 64)+"%")
	}
	limit := 10000
	if !rate.IsZero() {
		limit = max(1000, int(rate.BytesPerSec()*(n.Delay+n.Jitter+100*time.Millisecond).Seconds()/1000))
	}
	return append(args, "limit", strconv.Itoa(limit))
}

// tbfChildArgs are the arguments of `tc qdisc add` that put tbf under
// netem's handle 1:.
func tbfChildArgs(dev string, rate shape.Rate, burst int, latency time.Duration) []string {
	args := tbfArgs(dev, rate, burst, latency)
	// tbfArgs says "root"; the child hangs from netem's class.
	for i, a := range args {
		if a == "root" {
			return append(append(append([]string{}, args[:i]...), "parent", "1:1", "handle", "10:"), args[i+1:]...)
		}
	}
	return args
}

// SetRate changes the rate of every tbf qdisc of the topology (each end of
// each shaped link) to rate, its bucket to shape.DefaultBurst(rate), in
// place (`tc qdisc change`): connections stay up and what is queued is
// sent at the new rate. A topology with a delay line changes the tbf on
// its TUN devices. The zero Rate is ErrConfig; it needs root.
func (t *Topology) SetRate(ctx context.Context, rate shape.Rate) error {
	if rate.IsZero() {
		return fmt.Errorf("%w: no rate to change the links to", ErrConfig)
	}
	burst := shape.DefaultBurst(rate.Bits())
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, s := range t.Shaped {
		if err := run(ctx, append([]string{"tc", "-n", s.NS, "qdisc", "change"}, tbfArgs(s.Dev, rate, burst, t.Latency)...)...); err != nil {
			return err
		}
		t.Shaped[i].Rate, t.Shaped[i].Burst = rate, burst
	}
	return nil
}

// SetDevRate changes the rate of interface dev's tbf in place (`tc qdisc
// change`), its bucket to burst (0: shape.DefaultBurst(rate)), its
// latency to latency (0: DefaultLatency): connections stay up and what is
// queued leaves at the new rate. The tbf is the root qdisc ShapeDev put
// there, or with underNetem the child ShapeDevNetem put under netem. A
// device without that tbf fails with tc's error. It needs root.
func SetDevRate(ctx context.Context, dev string, rate shape.Rate, burst int, latency time.Duration, underNetem bool) error {
	if err := checkDev(dev); err != nil {
		return err
	}
	if rate.IsZero() || burst < 0 || latency < 0 {
		return fmt.Errorf("%w: rate %v, burst %d, latency %v: want a rate and no negatives", ErrConfig, rate, burst, latency)
	}
	if burst == 0 {
		burst = shape.DefaultBurst(rate.Bits())
	}
	if latency == 0 {
		latency = DefaultLatency
	}
	args := tbfArgs(dev, rate, burst, latency)
	if underNetem {
		args = tbfChildArgs(dev, rate, burst, latency)
	}
	return run(ctx, append([]string{"tc", "qdisc", "change"}, args...)...)
}

// DevSchedule is a rate schedule on a real interface (FollowDevSchedule).
type DevSchedule struct {
	// Dev is the interface, already shaped: ShapeDev, or ShapeDevNetem
	// with a rate when UnderNetem.
	Dev        string
	UnderNetem bool
	// Schedule is laid over time from Start; with Period above 0 it
	// starts again every Period after Start (Period must pass its last
	// offset), with 0 once.
	Schedule shape.Schedule
	Start    time.Time
	Period   time.Duration
	// Latency is the tbf's (0: DefaultLatency); each step's bucket is
	// shape.DefaultBurst of its rate.
	Latency time.Duration
	// Changed, when set, is told each change: the rate and when it took
	// effect.
	Changed func(shape.Rate, time.Time)
}

// FollowDevSchedule changes d.Dev's tbf to each step's rate at its offset
// (SetDevRate) until the schedule ends or, with a period, until ctx
// ends. It returns nil when ctx ends, and tc's first error.
func FollowDevSchedule(ctx context.Context, d DevSchedule) error {
	sched := d.Schedule
	if len(sched) == 0 {
		return fmt.Errorf("%w: an empty schedule", ErrConfig)
	}
	if d.Period < 0 || (d.Period > 0 && d.Period <= sched[len(sched)-1].At) {
		return fmt.Errorf("%w: schedule period %v: want 0 (once) or more than its last offset %v", ErrConfig, d.Period, sched[len(sched)-1].At)
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for round := time.Duration(0); ; round += d.Period {
		for _, st := range sched {
			t.Reset(time.Until(d.Start.Add(round + st.At)))
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if err := SetDevRate(ctx, d.Dev, st.Rate, 0, d.Latency, d.UnderNetem); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if d.Changed != nil {
				d.Changed(st.Rate, time.Now())
			}
		}
		if d.Period == 0 {
			return nil
		}
	}
}
