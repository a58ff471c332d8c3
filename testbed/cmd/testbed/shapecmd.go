package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/shape"
)

func runShape(ctx context.Context, args []string, log zerolog.Logger) error {
	fs := flag.NewFlagSet("shape", flag.ContinueOnError)
	dev := fs.String("dev", "", "interface to shape, e.g. eth1 (required)")
	var rate shape.Rate
	fs.Var(&rate, "rate", "tc `rate` of what DEV sends: 500mbit, 1gbit (bits/s), 100mbps (bytes/s)")
	burst := fs.Int("burst", 0, "tbf bucket size in bytes (0: what the rate sends in 4 ms, at least 64 KiB)")
	latency := fs.Duration("latency", netns.DefaultLatency, "tbf latency: longest a packet may queue before it is dropped")
	remove := fs.Bool("clear", false, "delete DEV's root qdisc, back to the kernel's default")
	show := fs.Bool("show", false, "print DEV's qdiscs and their counters (after --rate or --clear, if given)")
	wan := addWANFlags(fs, "with tc netem (the kernel's sch_netem), which delays what DEV sends by RTT/2: run it on both ends", false)
	var sched shape.Schedule
	fs.Var(&sched, "rate-schedule", "change DEV's rate over time: `steps` OFFSET:RATE, comma-separated, offsets from now (e.g. 0s:100mbit,3s:50mbit,6s:100mbit); the command stays in the foreground, changing the tbf in place (tc qdisc change), until the last step or, with --schedule-period, until interrupted; the rate at the start is --rate, else the step at 0s")
	period := fs.Duration("schedule-period", 0, "with --rate-schedule: start the schedule again every `time` (more than its last offset) until interrupted; 0: once")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `testbed shape: shape a real interface with the tc tbf qdisc the testbed puts on
its emulated link, for runs across two real nodes; or remove it, or show it.
Changing qdiscs needs root; --show alone does not.

Only what DEV sends is shaped: to shape both directions between a storage
node and a GPU node, run it on both, on the interface that faces the other.

--rate-schedule changes the rate while the command runs in the foreground
(a shared WAN link that halves and recovers): each step's rate at its
offset, in place, so that connections stay up; --schedule-period repeats it.
What it leaves is the last step's rate; --clear removes it.

--rtt, --jitter and --loss add a round trip with tc netem: DEV's root
qdisc becomes netem (what DEV sends waits RTT/2 ± jitter and loses the
fraction --loss), with tbf at --rate under it. Run it on both ends for the
full round trip. A kernel without netem refuses, and says so; 'testbed run
--rtt' emulates a WAN link in user space on such a kernel.

Examples:
  testbed shape --dev eth1 --rate 500mbit          cap eth1's egress at 500 Mbit/s
  testbed shape --dev eth1 --rate 1gbit --burst 262144 --latency 20ms --show
  testbed shape --dev eth1 --rate 500mbit --rtt 40ms --jitter 5ms --loss 0.1%%   (on both ends)
  testbed shape --dev eth1 --rate-schedule 0s:500mbit,3s:250mbit,6s:500mbit --schedule-period 20s
                                                   halve eth1's rate for 3 s of every 20 s
  testbed shape --dev eth1 --show                  print eth1's qdiscs and counters
  testbed shape --dev eth1 --clear                 remove the shaping

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("shape: unexpected arguments %q", fs.Args())
	}
	if len(sched) > 0 && rate.IsZero() {
		if sched[0].At != 0 {
			return fmt.Errorf("shape: --rate-schedule %s: want --rate, or a step at 0s, for the rate before its first step", sched.String())
		}
		rate = sched[0].Rate
	}
	switch {
	case *dev == "":
		fs.Usage()
		return fmt.Errorf("shape: --dev is required")
	case len(sched) > 0 && (*remove || *show):
		return fmt.Errorf("shape: --rate-schedule excludes --clear and --show (it runs until its last step)")
	case len(sched) == 0 && *period != 0:
		return fmt.Errorf("shape: --schedule-period needs --rate-schedule")
	case (!rate.IsZero() || wan.set()) && *remove:
		return fmt.Errorf("shape: --rate, --rtt, --jitter and --loss exclude --clear")
	case rate.IsZero() && !wan.set() && !*remove && !*show:
		fs.Usage()
		return fmt.Errorf("shape: want --rate, --rtt, --jitter, --loss, --clear or --show")
	case (!rate.IsZero() || wan.set() || *remove) && os.Geteuid() != 0:
		return fmt.Errorf("shape: changing %s's qdisc needs root (euid %d)", *dev, os.Geteuid())
	}
	switch {
	case wan.set():
		rtt, err := wan.one()
		if err != nil {
			return fmt.Errorf("shape: %w", err)
		}
		n := netns.Netem{Delay: rtt / 2, Jitter: *wan.jitter, Loss: float64(wan.loss)}
		if err := netns.ShapeDevNetem(ctx, *dev, rate, *burst, *latency, n); err != nil {
			return fmt.Errorf("shape: %w", err)
		}
		log.Info().Str("dev", *dev).Stringer("rate", rate).Str("delay", n.Delay.String()).Str("jitter", n.Jitter.String()).
			Stringer("loss", &wan.loss).Msg("shaped: netem at the root of dev's egress (tbf under it when a rate is set)")
	case !rate.IsZero():
		if err := netns.ShapeDev(ctx, *dev, rate, *burst, *latency); err != nil {
			return err
		}
		b := "default"
		if *burst > 0 {
			b = fmt.Sprint(*burst)
		}
		log.Info().Str("dev", *dev).Stringer("rate", rate).Str("burst", b).Str("latency", latency.String()).
			Msg("shaped: tbf at the root of dev's egress")
	case *remove:
		if err := netns.ClearDev(ctx, *dev); err != nil {
			return err
		}
		log.Info().Str("dev", *dev).Msg("cleared: dev's root qdisc is the kernel's default")
	}
	if len(sched) > 0 {
		return followSchedule(ctx, *dev, sched, *period, *latency, wan.set(), log)
	}
	if *show {
		out, err := netns.ShowDev(ctx, *dev)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) == "" {
			out = *dev + ": no qdisc listed (the kernel's default)\n"
		}
		fmt.Print(out)
	}
	return nil
}

// followSchedule runs --rate-schedule on dev, shaped a moment ago (under
// netem when underNetem), logging each change, until its last step or,
// with a period, until ctx ends.
func followSchedule(ctx context.Context, dev string, sched shape.Schedule, period, latency time.Duration, underNetem bool, log zerolog.Logger) error {
	start := time.Now()
	log.Info().Str("dev", dev).Stringer("schedule", sched).Str("period", period.String()).Msg("following the rate schedule (interrupt to stop; the rate then stays)")
	err := netns.FollowDevSchedule(ctx, netns.DevSchedule{Dev: dev, UnderNetem: underNetem, Schedule: sched, Start: start,
		Period: period, Latency: latency, Changed: func(r shape.Rate, at time.Time) {
			log.Info().Str("dev", dev).Stringer("rate", r).Str("at", at.Sub(start).Round(time.Millisecond).String()).Msg("rate changed")
		}})
	if err != nil {
		return fmt.Errorf("shape: --rate-schedule: %w", err)
	}
	return nil
}
