package main

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestParseLoss(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"0.1%", 0.001, true}, {"0.001", 0.001, true}, {"1%", 0.01, true}, {"0", 0, true},
		{"100%", 0, false}, {"1", 0, false}, {"-1%", 0, false}, {"abc", 0, false}, {"%", 0, false},
	} {
		got, err := parseLoss(c.in)
		if (err == nil) != c.ok || (c.ok && (got < c.want*0.999999 || got > c.want*1.000001)) {
			t.Errorf("parseLoss(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

// TestWANFlagsHelp: run and shape both list --rtt, --jitter and --loss
// with a sentence each.
func TestWANFlagsHelp(t *testing.T) {
	for _, how := range []string{"netns mode", "tc netem"} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		addWANFlags(fs, how)
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		for _, want := range []string{"-rtt time", how, "-jitter time", "-loss fraction", "0.1%"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("help lacks %q:\n%s", want, b.String())
			}
		}
	}
}

// TestRunWANNeedsNetns: --rtt on loopback is refused before anything runs.
func TestRunWANNeedsNetns(t *testing.T) {
	err := runRun(context.Background(), []string{"--data", t.TempDir(), "--mode", "loopback", "--rtt", "40ms"}, zerolog.New(io.Discard))
	if err == nil || !strings.Contains(err.Error(), "netns mode") {
		t.Errorf("run --mode loopback --rtt 40ms = %v, want an error naming netns mode", err)
	}
	err = runShape(context.Background(), []string{"--dev", "eth0", "--loss", "1%", "--clear"}, zerolog.New(io.Discard))
	if err == nil || !strings.Contains(err.Error(), "--clear") {
		t.Errorf("shape --loss with --clear = %v, want refused", err)
	}
}
