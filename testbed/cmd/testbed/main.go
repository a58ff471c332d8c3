// Command testbed generates datasets and measures the op pipeline; later
// subcommands emulate the two nodes and compare offloading policies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
)

const usage = `testbed: datasets, op measurements and policy experiments.

Usage:
  testbed gen   --kind imagenet-like|openimages-like -n N --out DIR [--seed S] [--classes C]
  testbed ops   --data DIR [--preset NAME | --spec FILE] [--seed S] [--bench SECONDS]
  testbed fidelity --data DIR[,DIR...] [--pipelines imagenet-train-q95,imagenet-train-q90] [--epochs E]
  testbed run   --data DIR | --gen KIND:N [--rate 100mbit,500mbit] [--storage-cpus 0.5,1] [--out DIR]
                [--storage-nodes N] [--compute-nodes M] [--storage-rates R1,R2] [--placements P1,P2]
                [--rtt 40ms [--jitter 5ms] [--loss 0.1%]] ...
  testbed shape --dev IFACE --rate R [--rtt T [--jitter J] [--loss L]] | --clear [--show]
  testbed serve --data DIR [--listen ADDR]
  testbed noise PROFILE PROFILE [PROFILE...]

Subcommands:
  gen    write a deterministic photo-like JPEG dataset in ImageFolder layout
  ops    run a pipeline over a folder of JPEGs: per-op output sizes and costs,
         the bytes each split point would send, and images/s on one core
  fidelity
         what a pipeline's JPEG round trip does to its crops: PSNR against
         the same crops without it, the largest error, the JPEG's size
  run    emulate the storage and GPU nodes (namespaces, tc, cgroups), run every
         policy and the torchvision peer, write results.json, a report and charts
  shape  apply (or --clear) the testbed's tc tbf shaping on a real interface,
         for runs across real machines
  serve  serve a folder of JPEGs over HTTP (the peer row's file server)
  noise  how far apart independent profiles of one dataset time the same
         samples, and the bias that leaves in a plan's choice of samples

Run 'testbed <subcommand> --help' for its flags. (testbed hog, which burns
CPU for run --contend-at, is internal.)
`

func main() {
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"}).With().Timestamp().Logger()
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprint(os.Stderr, usage)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "gen":
		err = runGen(ctx, args, log)
	case "ops":
		err = runOps(ctx, args, log)
	case "fidelity":
		err = runFidelity(ctx, args, log)
	case "run":
		err = runRun(ctx, args, log)
	case "shape":
		err = runShape(ctx, args, log)
	case "serve":
		err = runServe(ctx, args, log)
	case "noise":
		err = runNoise(ctx, args, log)
	case "hog":
		err = runHog(ctx, args, log)
	default:
		fmt.Fprintf(os.Stderr, "testbed: unknown subcommand %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		log.Error().Err(err).Msg("testbed failed")
		os.Exit(1)
	}
}
