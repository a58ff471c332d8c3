package netns

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/testbed/shape"
)

func TestShapeDevRejects(t *testing.T) {
	ctx := context.Background()
	gbit := shape.MustParseRate("1gbit")
	for _, c := range []struct {
		dev     string
		rate    shape.Rate
		burst   int
		latency time.Duration
	}{
		{"", gbit, 0, 0},
		{"eth0/x", gbit, 0, 0},
		{"-eth0", gbit, 0, 0},
		{"much-too-long-name", gbit, 0, 0},
		{"eth0", shape.Rate{}, 0, 0}, // no rate
		{"eth0", gbit, -1, 0},
		{"eth0", gbit, 0, -time.Millisecond},
	} {
		if err := ShapeDev(ctx, c.dev, c.rate, c.burst, c.latency); !errors.Is(err, ErrConfig) {
			t.Errorf("ShapeDev(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if err := ClearDev(ctx, "a b"); !errors.Is(err, ErrConfig) {
		t.Errorf("ClearDev(\"a b\") = %v, want ErrConfig", err)
	}
	if _, err := ShowDev(ctx, ""); !errors.Is(err, ErrConfig) {
		t.Errorf("ShowDev(\"\") = %v, want ErrConfig", err)
	}
}

func TestHasRootQdisc(t *testing.T) {
	for _, c := range []struct {
		out  string
		want bool
	}{
		{"", false},
		{"qdisc noqueue 0: root refcnt 2 \n", false},
		{"qdisc mq 0: root \nqdisc fq_codel 0: parent :1 limit 10240p\n", false},
		{"qdisc tbf 8001: root refcnt 2 rate 500Mbit burst 62500b lat 50ms \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n", true},
		{"qdisc fq 8002: root refcnt 2 limit 10000p\n", true},
		{"qdisc tbf 8001: parent 1:1 rate 1Gbit\n", false},
	} {
		if got := hasRootQdisc(c.out); got != c.want {
			t.Errorf("hasRootQdisc(%q) = %v, want %v", c.out, got, c.want)
		}
	}
}

// tbfRate finds the rate of the root tbf in ShowDev's text, in bits per
// second; 0 when there is none.
func tbfRate(out string) float64 {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "qdisc" || f[1] != "tbf" || f[3] != "root" {
			continue
		}
		for i := 4; i+1 < len(f); i++ {
			if f[i] == "rate" {
				r, _ := shape.ParseRate(f[i+1])
				return r.Bits()
			}
		}
	}
	return 0
}

// TestShapeDev shapes, reshapes and clears the storage end of an unshaped
// pair from inside its namespace, as `testbed shape` does on a real node,
// then checks nothing is left.
func TestShapeDev(t *testing.T) {
	prefix := ProcessPrefix() + "d"
	p := setup(t, Config{Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// NB: f runs on a goroutine of its own: it reports with t.Errorf and
	// returns its fatal errors, never t.Fatal.
	err := withNamespace(p.StorageNS, func() error {
		dev := p.StorageDev
		show := func() string {
			out, err := ShowDev(ctx, dev)
			if err != nil {
				t.Errorf("ShowDev: %v", err)
			}
			return out
		}
		if out := show(); tbfRate(out) != 0 {
			t.Errorf("unshaped pair has a tbf: %s", out)
		}
		if err := ClearDev(ctx, dev); err != nil {
			t.Errorf("ClearDev with no qdisc set: %v", err)
		}
		if err := ShapeDev(ctx, dev, shape.MustParseRate("500mbit"), 0, 0); err != nil {
			return err
		}
		out := show()
		if r := tbfRate(out); r != 500e6 || !strings.Contains(out, "lat 50ms") {
			t.Errorf("after ShapeDev 500mbit: rate %v, qdiscs:\n%s", r, out)
		}
		// Replacing, with an explicit burst and latency.
		if err := ShapeDev(ctx, dev, shape.MustParseRate("200mbit"), 100000, 20*time.Millisecond); err != nil {
			return err
		}
		out = show()
		t.Logf("after ShapeDev 200mbit:\n%s", out)
		if r := tbfRate(out); r != 200e6 || !strings.Contains(out, "burst 100000b") || !strings.Contains(out, "lat 20ms") {
			t.Errorf("after ShapeDev 200mbit: rate %v, qdiscs:\n%s", r, out)
		}
		if err := ClearDev(ctx, dev); err != nil {
			return err
		}
		if out := show(); tbfRate(out) != 0 || hasRootQdisc(out) {
			t.Errorf("after ClearDev:\n%s", out)
		}
		if err := ClearDev(ctx, dev); err != nil {
			t.Errorf("second ClearDev: %v", err)
		}
		if err := ShapeDev(ctx, "nosuchdev0", shape.MustParseRate("1gbit"), 0, 0); err == nil || errors.Is(err, ErrConfig) {
			t.Errorf("ShapeDev of a missing device = %v, want tc's error", err)
		}
		if _, err := ShowDev(ctx, "nosuchdev0"); err == nil {
			t.Error("ShowDev of a missing device succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The host's side of the storage end is untouched: it is not there.
	if out, err := output(ctx, "tc", "qdisc", "show", "dev", p.StorageDev); err == nil {
		t.Errorf("%s visible outside its namespace: %s", p.StorageDev, out)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, prefix)
}

// TestNetemArgs: the netem qdisc's command, and the tbf child under it.
func TestNetemArgs(t *testing.T) {
	rate := shape.MustParseRate("500mbit")
	got := strings.Join(netemArgs("eth1", rate, Netem{Delay: 20 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.001}), " ")
	// 62.5 MB/s x 125 ms / 1000 B = 7812 packets.
	want := "tc qdisc replace dev eth1 root handle 1: netem delay 20000us 5000us loss 0.1% limit 7812"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := strings.Join(netemArgs("eth1", shape.Rate{}, Netem{Loss: 0.02}), " "); got != "tc qdisc replace dev eth1 root handle 1: netem loss 2% limit 10000" {
		t.Errorf("loss only: %q", got)
	}
	got = strings.Join(tbfChildArgs("eth1", rate, 250000, 50*time.Millisecond), " ")
	if want := "dev eth1 parent 1:1 handle 10: tbf rate 500mbit burst 250000 latency 50000us"; got != want {
		t.Errorf("tbf child: got %q, want %q", got, want)
	}
	ctx := context.Background()
	for _, n := range []Netem{{Delay: -1}, {Loss: 1}, {Jitter: time.Millisecond}} {
		if err := ShapeDevNetem(ctx, "eth1", rate, 0, 0, n); !errors.Is(err, ErrConfig) {
			t.Errorf("ShapeDevNetem(%+v) = %v, want ErrConfig", n, err)
		}
	}
}

// TestFollowDevSchedule: a rate schedule on a real interface changes its
// tbf in place at each step's offset, in order, once or again every
// period until the context ends; a period within the schedule, an empty
// schedule and a device without a tbf are refused.
func TestFollowDevSchedule(t *testing.T) {
	sched := shape.Schedule{{At: 0, Rate: shape.MustParseRate("100mbit")}, {At: 150 * time.Millisecond, Rate: shape.MustParseRate("50mbit")},
		{At: 300 * time.Millisecond, Rate: shape.MustParseRate("80mbit")}}
	for _, d := range []DevSchedule{{Dev: "eth0"}, {Dev: "eth0", Schedule: sched, Period: 300 * time.Millisecond}, {Dev: "eth0", Schedule: sched, Period: -1}} {
		if err := FollowDevSchedule(context.Background(), d); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", d, err)
		}
	}
	prefix := ProcessPrefix() + "f"
	p := setup(t, Config{Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := withNamespace(p.StorageNS, func() error {
		dev := p.StorageDev
		if err := FollowDevSchedule(ctx, DevSchedule{Dev: dev, Schedule: sched, Start: time.Now()}); err == nil {
			t.Errorf("a schedule on a device without tbf: no error")
		}
		if err := ShapeDev(ctx, dev, shape.MustParseRate("100mbit"), 0, 0); err != nil {
			return err
		}
		var got []float64
		var at []time.Duration
		start := time.Now()
		d := DevSchedule{Dev: dev, Schedule: sched, Start: start, Changed: func(r shape.Rate, when time.Time) {
			out, err := ShowDev(ctx, dev)
			if err != nil {
				t.Errorf("ShowDev: %v", err)
			}
			if tbfRate(out) != r.Bits() {
				t.Errorf("told %v, the tbf says %v:\n%s", r, tbfRate(out), out)
			}
			got = append(got, r.Bits())
			at = append(at, when.Sub(start))
		}}
		if err := FollowDevSchedule(ctx, d); err != nil {
			return err
		}
		if want := []float64{100e6, 50e6, 80e6}; !slices.Equal(got, want) {
			t.Errorf("once: rates %v, want %v", got, want)
		}
		for i, st := range sched {
			// Never early; late by at most what a loaded machine takes to
			// run tc.
			if i < len(at) && (at[i] < st.At || at[i] > st.At+5*time.Second) {
				t.Errorf("step %d at %v, want from %v", i, at[i], st.At)
			}
		}
		// Again every 400 ms until the context ends: more than one round.
		got, at = nil, nil
		rctx, rcancel := context.WithTimeout(ctx, 1100*time.Millisecond)
		defer rcancel()
		d.Start, d.Period = time.Now(), 400*time.Millisecond
		start = d.Start
		if err := FollowDevSchedule(rctx, d); err != nil {
			return err
		}
		if len(got) < 4 || got[3] != 100e6 {
			t.Errorf("with a period: rates %v, want the schedule again after its third step", got)
		}
		return ClearDev(ctx, dev)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, prefix)
}
