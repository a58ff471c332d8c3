package experiment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
	"github.com/sophon-dl/sophon/testbed/tensors"
)

// TestConfigNodes: the N x M options' defaults and what they refuse.
func TestConfigNodes(t *testing.T) {
	r := shape.MustParseRate("100mbit")
	c := Config{Data: "x", Out: "x"}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.StorageNodes != 1 || c.ComputeNodes != 1 || len(c.Rates) != 1 || c.Rates[0].String() != DefaultRate || c.Placements != nil {
		t.Errorf("defaults: %d x %d nodes, rates %v, placements %v", c.StorageNodes, c.ComputeNodes, c.Rates, c.Placements)
	}
	c = Config{Data: "x", Out: "x", StorageNodes: 2, StorageRates: []shape.Rate{r, shape.MustParseRate("400mbit")}, Placements: Placements}
	if err := c.defaults(); err != nil || len(c.Rates) != 0 {
		t.Errorf("storage rates: %v, rates %v (want none)", err, c.Rates)
	}
	for name, cfg := range map[string]Config{
		"negative nodes":         {StorageNodes: -1},
		"rates and storage rate": {StorageNodes: 2, Rates: []shape.Rate{r}, StorageRates: []shape.Rate{r, r}},
		"a rate per node":        {StorageNodes: 3, StorageRates: []shape.Rate{r, r}},
		"an unset storage rate":  {StorageNodes: 2, StorageRates: []shape.Rate{r, {}}},
		"unknown placement":      {Placements: []string{"random"}},
		"placement twice":        {Placements: []string{"pull", "pull"}},
		"contention with 2 x 1":  {StorageNodes: 2, ContendAt: 0.5},
		"contention with 1 x 2":  {ComputeNodes: 2, ContendAt: 0.5},
	} {
		cfg.Data, cfg.Out = "x", "x"
		if err := cfg.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// TestPoints: the grid's rate points, each storage link at the grid's
// rate, or one point of per-link rates named by them.
func TestPoints(t *testing.T) {
	c := Config{StorageNodes: 2, Rates: []shape.Rate{shape.MustParseRate("100mbit"), shape.MustParseRate("1gbit")}}
	ps := c.points()
	if len(ps) != 2 || ps[0].label != "100mbit" || ps[0].bits != 100e6 || len(ps[0].links) != 2 || ps[0].links[1].String() != "100mbit" ||
		ps[1].label != "1gbit" || ps[1].links[0].Bits() != 1e9 {
		t.Errorf("grid points %+v", ps)
	}
	c = Config{StorageNodes: 2, StorageRates: []shape.Rate{shape.MustParseRate("400mbit"), shape.MustParseRate("100mbit")}}
	ps = c.points()
	if len(ps) != 1 || ps[0].label != "400mbit+100mbit" || ps[0].bits != 500e6 || ps[0].links[1].String() != "100mbit" {
		t.Errorf("storage rates point %+v", ps)
	}
	if got := cellDir(ps[0].label, 1, 0); got != "400mbit+100mbit-cpu1" {
		t.Errorf("cell folder %q", got)
	}
}

// TestRTTPoints: --rtt is a dimension of the grid inside each rate: every
// point on the delay line (0 included) at its own round trip, with the
// run's jitter, loss and seed, named for it; without --rtt, --loss alone
// still puts the one point on the delay line, and neither leaves the
// veth pair.
func TestRTTPoints(t *testing.T) {
	ms := time.Millisecond
	c := Config{StorageNodes: 1, Rates: []shape.Rate{shape.MustParseRate("100mbit"), shape.MustParseRate("500mbit")},
		RTTs: []time.Duration{0, 20 * ms, 80 * ms}, Loss: 0.001, Jitter: ms, Seed: 3}
	ps := c.points()
	var got []string
	for _, p := range ps {
		got = append(got, cellDir(p.label, 1, 0))
		if p.wan == nil || p.wan.Loss != 0.001 || p.wan.Jitter != ms || p.wan.Seed != 3 {
			t.Errorf("%s: wan %+v, want the run's loss, jitter and seed", p.label, p.wan)
		}
		if !strings.HasPrefix(p.label, p.rate+"-rtt") || p.label != p.rate+"-rtt"+rttName(p.wan.RTT) {
			t.Errorf("point %q of rate %q at %v", p.label, p.rate, p.wan.RTT)
		}
	}
	want := []string{"100mbit-rtt0-cpu1", "100mbit-rtt20ms-cpu1", "100mbit-rtt80ms-cpu1", "500mbit-rtt0-cpu1", "500mbit-rtt20ms-cpu1", "500mbit-rtt80ms-cpu1"}
	if !slices.Equal(got, want) {
		t.Errorf("cells %v, want %v", got, want)
	}
	c = Config{StorageNodes: 1, Rates: []shape.Rate{shape.MustParseRate("100mbit")}, Loss: 0.001}
	if ps := c.points(); len(ps) != 1 || ps[0].wan == nil || ps[0].wan.RTT != 0 || ps[0].label != "100mbit-rtt0" {
		t.Errorf("loss alone: %+v", ps)
	}
	c = Config{StorageNodes: 1, Rates: []shape.Rate{shape.MustParseRate("100mbit")}}
	if ps := c.points(); len(ps) != 1 || ps[0].wan != nil || ps[0].label != "100mbit" {
		t.Errorf("no WAN: %+v", ps)
	}
}

func TestRankPath(t *testing.T) {
	x := &experiment{cfg: Config{ComputeNodes: 1}}
	if got := x.rankPath("/o/profile.zst", 0); got != "/o/profile.zst" {
		t.Errorf("one rank: %s", got)
	}
	x.cfg.ComputeNodes = 2
	if got := x.rankPath("/o/profile-100mbit-cpu0.5.zst", 1); got != "/o/profile-100mbit-cpu0.5-rank1.zst" {
		t.Errorf("rank 1 of 2: %s", got)
	}
}

// writeSamples writes a --samples-out file: epoch, sample and hash lines.
func writeSamples(t *testing.T, path string, epochs int, ids []int, hash func(e, id int) string) {
	t.Helper()
	var b strings.Builder
	for e := range epochs {
		for _, id := range ids {
			fmt.Fprintf(&b, "%d %d %s\n", e, id, hash(e, id))
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckSamplesRanks: exactly-once and content over ranks together,
// each rank's file holding its shard (ids i % 2 == rank).
func TestCheckSamplesRanks(t *testing.T) {
	dir := t.TempDir()
	const epochs, total = 2, 6
	hash := func(e, id int) string { return fmt.Sprintf("h%d-%d", e, id) }
	reports := func(perRank ...int) [][]report.EpochReport {
		var out [][]report.EpochReport
		for _, n := range perRank {
			var rs []report.EpochReport
			for e := range epochs {
				rs = append(rs, report.EpochReport{Epoch: uint64(e), Samples: n})
			}
			out = append(out, rs)
		}
		return out
	}
	file := func(name string, ids []int, h func(e, id int) string) string {
		p := filepath.Join(dir, name)
		writeSamples(t, p, epochs, ids, h)
		return p
	}
	even, odd := file("even", []int{0, 2, 4}, hash), file("odd", []int{1, 3, 5}, hash)
	x := &experiment{cfg: Config{Epochs: epochs}, res: &results.Results{Dataset: results.Dataset{Samples: total}}, ref: map[[2]uint64]string{}}

	var run results.Run
	x.checkSamples(&run, reports(3, 3), []string{even, odd}, true)
	if !run.ExactlyOnce || !run.ContentMatches || len(x.ref) != epochs*total {
		t.Fatalf("two shards: exactly once %v, content %v, reference of %d", run.ExactlyOnce, run.ContentMatches, len(x.ref))
	}
	for name, tc := range map[string]struct {
		files   []string
		reports [][]report.EpochReport
		once    bool
		content bool
	}{
		"same again":             {[]string{odd, even}, reports(3, 3), true, true},
		"a sample in both ranks": {[]string{even, file("odd+2", []int{1, 2, 3, 5}, hash)}, reports(3, 4), false, false},
		"a sample missing":       {[]string{even, file("odd-5", []int{1, 3}, hash)}, reports(3, 2), false, false},
		"a rank short an epoch":  {[]string{even, odd}, [][]report.EpochReport{reports(3)[0], reports(3)[0][:1]}, false, false},
		"an id out of range":     {[]string{even, file("odd7", []int{1, 3, 7}, hash)}, reports(3, 3), false, false},
		"another tensor": {[]string{even, file("odd-other", []int{1, 3, 5}, func(e, id int) string {
			if id == 3 {
				return "other"
			}
			return hash(e, id)
		})}, reports(3, 3), true, false},
	} {
		var run results.Run
		x.checkSamples(&run, tc.reports, tc.files, true)
		if run.ExactlyOnce != tc.once || run.ContentMatches != tc.content {
			t.Errorf("%s: exactly once %v, content %v; want %v, %v", name, run.ExactlyOnce, run.ContentMatches, tc.once, tc.content)
		}
	}

	// A 1 x 1 reference read from its file, as Config.Reference.
	ref, err := tensors.Read(file("one", []int{0, 1, 2, 3, 4, 5}, hash))
	if err != nil || ref.Dups != 0 || len(ref.Got) != epochs*total || ref.PerEpoch[1] != total {
		t.Fatalf("reference: %d samples, %d duplicates, %v", len(ref.Got), ref.Dups, err)
	}
	x.ref = ref.Got
	run = results.Run{}
	x.checkSamples(&run, reports(3, 3), []string{even, odd}, true)
	if !run.ExactlyOnce || !run.ContentMatches {
		t.Errorf("against the 1 x 1 reference: exactly once %v, content %v", run.ExactlyOnce, run.ContentMatches)
	}
}
