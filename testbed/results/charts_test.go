package results

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/internal/testutil"
)

// element is one SVG element as the decoder saw it.
type element = testutil.SVGElement

// parseSVG decodes every element of an SVG, failing the test on bad XML.
func parseSVG(t *testing.T, data []byte) []element { t.Helper(); return testutil.ParseSVG(t, data) }

func parseSVGFile(t *testing.T, path string) []element {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseSVG(t, b)
}

func byClass(els []element, class string) []element { return testutil.SVGByClass(els, class) }

func attr(t *testing.T, e element, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(e.Attr[name], 64)
	if err != nil {
		t.Fatalf("%s %s=%q: %v", e.Name, name, e.Attr[name], err)
	}
	return v
}

// axisY maps a value to y through the chart's own tick lines, so a test
// checks a mark against the axis the reader sees.
func axisY(t *testing.T, els []element) func(float64) float64 {
	t.Helper()
	ticks := byClass(els, "tick")
	if len(ticks) < 2 {
		t.Fatalf("got %d y ticks, want at least 2", len(ticks))
	}
	lo, hi := ticks[0], ticks[len(ticks)-1]
	v0, y0 := attr(t, lo, "data-value"), attr(t, lo, "y1")
	v1, y1 := attr(t, hi, "data-value"), attr(t, hi, "y1")
	return func(v float64) float64 { return y0 + (v-v0)/(v1-v0)*(y1-y0) }
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// chartedPolicies are the policies of a synthetic cell that must appear in
// its charts.
func chartedPolicies(g testCell) []string {
	var out []string
	for _, p := range testPolicies {
		if p.name == PeerPolicy && g.rate == "1gbit" && g.cpus == 2 {
			continue // skipped
		}
		if p.name == "fastflow" && g.rate == "500mbit" && g.cpus == 2 {
			continue // failed
		}
		out = append(out, p.name)
	}
	return out
}

func TestCharts(t *testing.T) {
	dir := t.TempDir()
	_, charts, err := WriteReport(dir, synthetic(testGrid))
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range charts {
		parseSVGFile(t, ch) // every chart is well-formed XML
	}

	for _, g := range testGrid {
		base := slug(g.rate) + "-cpu" + cpusString(g.cpus)
		want := chartedPolicies(g)
		t.Run(base, func(t *testing.T) {
			// Epoch time: one bar per charted policy, heights proportional
			// to the values, a predicted tick for each policy run and the
			// bound where the axis puts it.
			els := parseSVGFile(t, filepath.Join(dir, "epoch-time-"+base+".svg"))
			bars := byClass(els, "bar")
			if got := categories(bars); !slices.Equal(got, sorted(want)) {
				t.Errorf("epoch bars %v, want %v", got, sorted(want))
			}
			height := map[string]float64{}
			for _, b := range bars {
				height[b.Attr["data-category"]] = attr(t, b, "height")
			}
			if got, want := height["nooff"]/height["sophon"], 10.0/4; !near(got, want, 1e-3) {
				t.Errorf("nooff/sophon bar height ratio %v, want %v", got, want)
			}
			y := axisY(t, els)
			for _, b := range bars {
				top := attr(t, b, "y")
				if v := attr(t, b, "data-value"); !near(top, y(v), 0.02) {
					t.Errorf("bar %s top at %v, axis puts %v at %v", b.Attr["data-category"], top, v, y(v))
				}
			}
			bound := byClass(els, "bound")
			if len(bound) != 1 {
				t.Fatalf("got %d bound lines, want 1", len(bound))
			}
			bv := 3.5 * g.factor
			if v := attr(t, bound[0], "data-value"); !near(v, bv, 1e-9) {
				t.Errorf("bound %v, want %v", v, bv)
			}
			if by := attr(t, bound[0], "y1"); !near(by, y(bv), 0.02) || by != attr(t, bound[0], "y2") {
				t.Errorf("bound line at y %v, axis puts %v at %v", by, bv, y(bv))
			}
			if bound[0].Attr["stroke-dasharray"] == "" {
				t.Error("bound line is not dashed")
			}
			if !slices.ContainsFunc(byClass(els, "bound-label"), func(e element) bool {
				return strings.HasPrefix(e.Text, "bound ")
			}) {
				t.Error("bound line has no label")
			}
			pred := byClass(els, "predicted")
			if got := len(pred); got != len(want)-boolInt(slices.Contains(want, PeerPolicy)) {
				t.Errorf("got %d predicted ticks for %v", got, want)
			}
			for _, p := range pred {
				if v := attr(t, p, "data-value"); !near(attr(t, p, "y1"), y(v), 0.02) {
					t.Errorf("predicted tick of %s off its value", p.Attr["data-category"])
				}
			}

			// Bytes: an agent and a kernel bar per charted policy.
			els = parseSVGFile(t, filepath.Join(dir, "wire-bytes-"+base+".svg"))
			var agent, kernel []element
			for _, b := range byClass(els, "bar") {
				switch b.Attr["data-series"] {
				case "agent bytes":
					agent = append(agent, b)
				case "kernel bytes":
					kernel = append(kernel, b)
				}
			}
			if got := categories(agent); !slices.Equal(got, sorted(want)) {
				t.Errorf("agent byte bars %v, want %v", got, sorted(want))
			}
			if got := categories(kernel); !slices.Equal(got, sorted(want)) {
				t.Errorf("kernel byte bars %v, want %v", got, sorted(want))
			}
			for _, b := range agent {
				if b.Attr["data-category"] == "nooff" && attr(t, b, "data-value") != 100 {
					t.Errorf("nooff agent MB %v, want 100", b.Attr["data-value"])
				}
			}

			// Storage CPU: one bar per charted policy, proportional.
			els = parseSVGFile(t, filepath.Join(dir, "storage-cpu-"+base+".svg"))
			bars = byClass(els, "bar")
			if got := categories(bars); !slices.Equal(got, sorted(want)) {
				t.Errorf("storage CPU bars %v, want %v", got, sorted(want))
			}
			for _, b := range bars {
				height[b.Attr["data-category"]] = attr(t, b, "height")
			}
			if got, want := height["alloff"]/height["sophon"], 20.0/9; !near(got, want, 1e-3) {
				t.Errorf("alloff/sophon storage CPU height ratio %v, want %v", got, want)
			}
		})
	}

	// Sweeps: a line per policy, each point where the axis puts its value.
	els := parseSVGFile(t, filepath.Join(dir, "sweep-rate-cpu0.5.svg"))
	y := axisY(t, els)
	points := byClass(els, "point")
	if len(points) != 2*len(testPolicies) {
		t.Errorf("got %d points, want %d", len(points), 2*len(testPolicies))
	}
	for _, p := range points {
		if v := attr(t, p, "data-value"); !near(attr(t, p, "cy"), y(v), 0.02) {
			t.Errorf("point %s at %v off its value %v", p.Attr["data-series"], p.Attr["cy"], v)
		}
	}
	if got := len(byClass(els, "line")); got != len(testPolicies) {
		t.Errorf("got %d lines, want %d", got, len(testPolicies))
	}
	els = parseSVGFile(t, filepath.Join(dir, "sweep-cpus-1gbit.svg"))
	if got := len(byClass(els, "point")); got != 2*len(testPolicies)-1 { // peer skipped at 2 CPUs
		t.Errorf("got %d points, want %d", got, 2*len(testPolicies)-1)
	}
}

func TestSweepChartsNeedTwoPoints(t *testing.T) {
	skipAll := func(r *Results, cell int) *Results {
		for i := range r.Cells[cell].Runs {
			r.Cells[cell].Runs[i].Skipped = "no link"
		}
		return r
	}
	for _, tt := range []struct {
		name string
		r    *Results
		want []string
	}{
		{"1x1", synthetic(testGrid[:1]), nil},
		{"1 rate x 2 cpus", synthetic(testGrid[:2]), []string{"sweep-cpus-500mbit.svg"}},
		{"2 rates x 1 cpu", synthetic([]testCell{testGrid[0], testGrid[2]}), []string{"sweep-rate-cpu0.5.svg"}},
		{"2x2", synthetic(testGrid), []string{
			"sweep-rate-cpu0.5.svg", "sweep-rate-cpu2.svg", "sweep-cpus-500mbit.svg", "sweep-cpus-1gbit.svg",
		}},
		{"2 rates, one all skipped", skipAll(synthetic([]testCell{testGrid[0], testGrid[2]}), 1), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, charts, err := WriteReport(t.TempDir(), tt.r)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ch := range charts {
				if name := filepath.Base(ch); strings.HasPrefix(name, "sweep-") {
					got = append(got, name)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestChartFileNames(t *testing.T) {
	r := synthetic(testGrid[:1])
	r.Cells = append(r.Cells, r.Cells[0])
	r.Cells[0].Rate = "500 Mbit/s"
	r.Cells[1].Rate = "../500-MBIT.s"
	_, charts, err := WriteReport(t.TempDir(), r)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range charts {
		got = append(got, filepath.Base(ch))
	}
	want := []string{
		"epoch-time-500-mbit-s-cpu0.5.svg", "wire-bytes-500-mbit-s-cpu0.5.svg", "storage-cpu-500-mbit-s-cpu0.5.svg",
		"epoch-time-500-mbit.s-cpu0.5.svg", "wire-bytes-500-mbit.s-cpu0.5.svg", "storage-cpu-500-mbit.s-cpu0.5.svg",
		// No sweep: both rates are 500 Mbit/s, one x point.
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, tt := range []struct{ in, want string }{
		{"500mbit", "500mbit"},
		{"1 Gbit/s", "1-gbit-s"},
		{"../..", "x"},
		{"", "x"},
		{"0.5", "0.5"},
	} {
		if got := slug(tt.in); got != tt.want {
			t.Errorf("slug(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
	n := namer{}
	if a, b := n.name("x"), n.name("x"); a != "x.svg" || b != "x-2.svg" {
		t.Errorf("namer gave %q, %q, want x.svg, x-2.svg", a, b)
	}
}

func categories(els []element) []string {
	var out []string
	for _, e := range els {
		out = append(out, e.Attr["data-category"])
	}
	return sorted(out)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
