package svgchart

import (
	"slices"
	"testing"

	"github.com/sophon-dl/sophon/internal/testutil"
)

// element is one SVG element as the decoder saw it.
type element = testutil.SVGElement

// parseSVG decodes every element of an SVG, failing the test on bad XML.
func parseSVG(t *testing.T, data []byte) []element { t.Helper(); return testutil.ParseSVG(t, data) }

func byClass(els []element, class string) []element { return testutil.SVGByClass(els, class) }

func TestChartEscapesText(t *testing.T) {
	odd := `a<b & "c" 'd'`
	c := Bar{
		Title:      "title " + odd,
		YLabel:     odd,
		Categories: []string{odd, "plain"},
		Series:     []BarSeries{{Name: odd, Color: "#000000", Values: []float64{1, 2}}},
		Bound:      0.5, BoundLabel: odd,
	}
	els := parseSVG(t, c.SVG())
	bars := byClass(els, "bar")
	if len(bars) != 2 || bars[0].Attr["data-category"] != odd {
		t.Errorf("got bars %v, want the first named %q", bars, odd)
	}
	l := Line{
		Title: odd, XLabel: odd, YLabel: odd,
		XTicks: []XTick{{1, odd}, {2, "2"}},
		Series: []LineSeries{{Name: odd, Color: "#000000", X: []float64{1, 2}, Y: []float64{3, 4}}},
	}
	if got := byClass(parseSVG(t, l.SVG()), "point"); len(got) != 2 || got[0].Attr["data-series"] != odd {
		t.Errorf("got points %v, want 2 named %q", got, odd)
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tt := range []struct {
		max  float64
		want []float64
	}{
		{9.5, []float64{0, 2, 4, 6, 8, 10}},
		{10, []float64{0, 2, 4, 6, 8, 10}},
		{0.37, []float64{0, 0.1, 0.2, 0.3, 0.4}},
		{100, []float64{0, 20, 40, 60, 80, 100}},
		{1234, []float64{0, 500, 1000, 1500}},
		{0, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
	} {
		if got, _ := niceTicks(tt.max, 5); !slices.Equal(got, tt.want) {
			t.Errorf("niceTicks(%v): got %v, want %v", tt.max, got, tt.want)
		}
	}
}
