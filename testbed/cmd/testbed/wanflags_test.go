package main

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

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
	for i, how := range []string{"netns mode", "tc netem"} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		addWANFlags(fs, how, i == 0)
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

// TestRTTList: run's --rtt is a list of round trips, 0 allowed, none
// negative, past 10 s or twice; shape takes one.
func TestRTTList(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		in   string
		want []time.Duration
		ok   bool
	}{
		{"40ms", []time.Duration{40 * ms}, true},
		{"0,20ms,80ms", []time.Duration{0, 20 * ms, 80 * ms}, true},
		{" 0 , 1s ", []time.Duration{0, time.Second}, true},
		{"20ms,20ms", nil, false}, {"-5ms", nil, false}, {"11s", nil, false}, {"20", nil, false}, {"", nil, false}, {"20ms,", nil, false},
	} {
		var l rttList
		err := l.Set(c.in)
		if (err == nil) != c.ok || (c.ok && !slices.Equal(l, c.want)) {
			t.Errorf("--rtt %q = %v, %v; want %v (ok %v)", c.in, l, err, c.want, c.ok)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	w := addWANFlags(fs, "x", false)
	if err := fs.Parse([]string{"--rtt", "20ms,80ms"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.one(); err == nil {
		t.Error("shape --rtt 20ms,80ms: no error, want one round trip")
	}
	err := runShape(context.Background(), []string{"--dev", "eth0", "--rtt", "20ms,80ms"}, zerolog.New(io.Discard))
	if err == nil {
		t.Error("shape --rtt 20ms,80ms ran")
	}
}

// TestRunWANNeedsNetns: --rtt and --cc on loopback are refused before
// anything runs.
func TestRunWANNeedsNetns(t *testing.T) {
	err := runRun(context.Background(), []string{"--data", t.TempDir(), "--mode", "loopback", "--cc", "cubic"}, zerolog.New(io.Discard))
	if err == nil || !strings.Contains(err.Error(), "netns mode") {
		t.Errorf("run --mode loopback --cc cubic = %v, want an error naming netns mode", err)
	}
	err = runRun(context.Background(), []string{"--data", t.TempDir(), "--mode", "loopback", "--rtt", "0,40ms"}, zerolog.New(io.Discard))
	if err == nil || !strings.Contains(err.Error(), "netns mode") {
		t.Errorf("run --mode loopback --rtt 40ms = %v, want an error naming netns mode", err)
	}
	err = runShape(context.Background(), []string{"--dev", "eth0", "--loss", "1%", "--clear"}, zerolog.New(io.Discard))
	if err == nil || !strings.Contains(err.Error(), "--clear") {
		t.Errorf("shape --loss with --clear = %v, want refused", err)
	}
}
