package experiment

import (
	"slices"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// TestNoResplitRuns: a "<policy>-noresplit" row runs the policy with the
// compute agent's --resplit=false, and only it; with "-est" and under
// --work-conserving both the suffixes keep their meaning.
func TestNoResplitRuns(t *testing.T) {
	x := &experiment{cfg: Config{Epochs: 2, Pipeline: "imagenet-train", GPURate: 100}, cellProfile: "/out/p.zst", computeTLS: [][]string{nil}}
	runs := policyRuns([]string{"optimal", "optimal-noresplit", "sophon-est-noresplit"}, WorkConservingBoth, nil)
	var got []string
	for _, r := range runs {
		args := x.policyArgs([]string{"10.0.0.1:7070"}, r, 0, "/out/c/"+r.name+".jsonl", "/out/c/"+r.name+".samples")
		pol, _ := flagValue(args, "--policy")
		s := r.name + ":" + pol
		if slices.Contains(args, noResplit) {
			s += "/noresplit"
		}
		if r.est {
			s += "/est"
		}
		got = append(got, s)
	}
	want := []string{"optimal:optimal", "optimal-nowc:optimal", "optimal-noresplit:optimal/noresplit", "optimal-noresplit-nowc:optimal/noresplit",
		"sophon-est-noresplit:sophon/noresplit/est", "sophon-est-noresplit-nowc:sophon/noresplit/est"}
	if !slices.Equal(got, want) {
		t.Errorf("runs\n got  %v\n want %v", got, want)
	}
	c := Config{Data: "d", Out: "o", Policies: []string{"optimal-noresplit"}}
	if err := c.defaults(); err != nil {
		t.Errorf("optimal-noresplit refused: %v", err)
	}
	c = Config{Data: "d", Out: "o", RateSchedule: shape.Schedule{{At: time.Second, Rate: shape.MustParseRate("50mbit")}},
		StorageRates: []shape.Rate{shape.MustParseRate("100mbit")}}
	if err := c.defaults(); err == nil {
		t.Errorf("a rate schedule with storage rates of their own was taken")
	}
}

// TestRateChanges: each change is put into the epoch whose report line it
// fell in, its time into that epoch from the line's start; a change in an
// epoch the agent never reported is dropped.
func TestRateChanges(t *testing.T) {
	t0 := time.Unix(100, 0)
	rs := []report.EpochReport{{Epoch: 0, StartUnixNS: t0.UnixNano()}, {Epoch: 1, StartUnixNS: t0.Add(10 * time.Second).UnixNano()}}
	half := shape.MustParseRate("50mbit")
	chs := []change{
		{line: 1, step: shape.Step{At: 3 * time.Second, Rate: half}, at: t0.Add(13050 * time.Millisecond)},
		{line: 2, step: shape.Step{At: 3 * time.Second, Rate: half}, at: t0.Add(30 * time.Second)},
	}
	got := rateChanges(chs, rs)
	if len(got) != 1 {
		t.Fatalf("%d changes, want 1: %+v", len(got), got)
	}
	if g := got[0]; g.Epoch != 1 || g.Rate != "50mbit" || g.PlannedSeconds != 3 || g.AtSeconds < 3.049 || g.AtSeconds > 3.051 {
		t.Errorf("change %+v, want epoch 1, 50mbit, planned 3 s, at 3.05 s", g)
	}
}
